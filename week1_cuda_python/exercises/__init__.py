"""Week 1 exercises: fill in each stub, then `pytest tests/week1 --impl=exercises`."""
