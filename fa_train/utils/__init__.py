"""Helpers shared by train.py, the datamodules and tests: run folders, checkpoints and resume,
resumable sampling, provenance."""
