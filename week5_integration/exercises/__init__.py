"""Week 5 exercises: fill in each stub, then `pytest tests/week5 --impl=exercises`."""
