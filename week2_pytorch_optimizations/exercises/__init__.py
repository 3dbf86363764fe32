"""Week 2 exercises: fill in each stub, then `pytest tests/week2 --impl=exercises`."""
