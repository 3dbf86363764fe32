"""Week 3 exercises: fill in each stub, then `pytest tests/week3 --impl=exercises`."""
