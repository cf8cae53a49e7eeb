"""The experiment config: one schema, JAX-free, used by the CLI, YAML files, the web form and the API.

schema.py      the sections and fields (defaults, bounds, help text): `ExperimentConfig`
loading.py     raw data / YAML text / a file + `--set` overrides -> a validated config
yaml_guard.py  the one guarded YAML loader (alias bombs, deep nesting, oversize text)
checks.py      cross-field rules (batch divisibility, the mesh and its devices, data, rewards, presets)
form_specs.py  the schema as plain data, for the web form
errors.py      `Problem` (dotted field + what would fix it) and `ConfigError`
metric_names.py  the metric names a run reports (a config may name one for keep-best)
"""

from trainers.config.checks import check_config
from trainers.config.form_specs import (
    FieldSpec,
    SectionSpec,
    field_specs,
    iter_field_specs,
)
from trainers.config.loading import (
    DATA_PATH_REFUSED,
    apply_overrides,
    load_config,
    parse_config,
    parse_yaml,
)
from trainers.config.schema import ExperimentConfig, OptimizerSection
from trainers.config.yaml_guard import load_yaml_data
from trainers.errors import ConfigError, Problem

__all__ = [
    "ConfigError",
    "DATA_PATH_REFUSED",
    "ExperimentConfig",
    "FieldSpec",
    "OptimizerSection",
    "Problem",
    "SectionSpec",
    "apply_overrides",
    "check_config",
    "field_specs",
    "iter_field_specs",
    "load_config",
    "load_yaml_data",
    "parse_config",
    "parse_yaml",
]
