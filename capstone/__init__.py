"""The capstone: a GPT-2-small-sized model trained and served with the course's own kernels."""
