"""Experiments, their runs and what runs report, rollout samples, and datasets (one job per module).

Experiments and runs
  models          Experiment, ConfigVersion, Run (the status state machine), MetricPoint,
                  SeriesSnapshot, Checkpoint, RunEvent; re-exports the two models below
  configs         the one way to validate a config (the trainer's schema, with the platform's roots)
  config_limits   per-field bounds on configs
  access          who may see and steer what (the platform's one rule)
  signals         run_status_changed, which higher apps (sweeps, evaluations, alerts) listen to
  metric_series   a run's metric series read, cached and downsampled for charts
  run_compare     several runs' series for the compare page (cached, snapshotted)
  run_filters     the run list's filters; run_labels: tags and notes
  models_dir      the model folders users may train from; shown_paths: paths shown without server dirs
  admin           the admin of the above (the run actions and workers are runner.admin's)

Rollout samples
  sample_models   RolloutSample, SampleKind
  sample_query    filters and keyset pages for the rollout browser
  sample_text     chat segments of a sample's text
  sample_episodes a multi-turn sample's episode (turns, reward parts, end reason) read from its extra

Datasets
  dataset_models  Dataset (uploaded JSONL, owned and shared)
  dataset_files   checking and storing an upload (Django-free)
  datasets        upload, share, delete (the rules the page, the API and the admin share)
  dataset_admin   the datasets' admin
"""
