"""Small helpers shared by train.py and tests."""
