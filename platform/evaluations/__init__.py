"""Evaluation jobs: a checkpoint (or a model folder) scored on a dataset with greedy accuracy,
pass@k and the run's rewards, as a Celery job; results per (checkpoint, dataset) make a leaderboard."""
