"""Sweeps: a search over config fields (grid, random, or Optuna's TPE through ask-and-tell), each
trial a run of the sweep's experiment, weak trials pruned early by Optuna's pruners. The database is
the record; Optuna's study is rebuilt from it whenever a decision is needed."""
