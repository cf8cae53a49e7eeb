"""field_specs(): the schema as plain data, complete and in order, so a form needs no field list."""

from __future__ import annotations

import json

from trainers.config import (
    ExperimentConfig,
    field_specs,
    iter_field_specs,
    parse_config,
)


def _raw_from_defaults() -> dict:
    raw: dict = {}
    for spec in iter_field_specs():
        node = raw
        *parents, leaf = spec.path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = spec.default
    return raw


def _leaf_paths(data: dict, prefix: str = "") -> list[str]:
    """Dotted paths of the leaves of nested config data, in order (a sub-section's dict is walked; an
    empty dict is a mapping field's default, `env.settings`: a leaf)."""
    out = []
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        out += _leaf_paths(value, path) if isinstance(value, dict) and value else [path]
    return out


def test_sections_follow_the_schema_order():
    keys = [s.key for s in field_specs()]
    assert keys == [
        "",
        "model",
        "data",
        "rewards",
        "judge",
        "rollout",
        "batch",
        "grpo",
        "async",
        "mesh",
        "cluster",
        "optimizer",
        "train",
        "checkpoint",
        "eval",
        "env",
    ]
    assert [f.path for f in field_specs()[0].fields] == ["seed"]


def test_every_leaf_field_is_described_once_with_its_default():
    defaults = ExperimentConfig().to_dict()
    paths = [spec.path for spec in iter_field_specs()]
    assert len(paths) == len(set(paths))
    assert paths == _leaf_paths(defaults)
    # The defaults alone rebuild the default config, and every default is plain JSON data.
    assert parse_config(_raw_from_defaults()).to_dict() == defaults
    json.dumps([s.as_dict() for s in iter_field_specs()])


def test_kinds_choices_bounds_and_descriptions():
    specs = {s.path: s for s in iter_field_specs()}
    assert (specs["batch.prompts_per_step"].kind, specs["batch.prompts_per_step"].nullable) == ("int", False)
    assert (specs["batch.mini_batch_prompts"].kind, specs["batch.mini_batch_prompts"].nullable) == ("int", True)
    assert dict(specs["batch.mini_batch_prompts"].bounds) == {"ge": 1, "le": 65536}
    assert dict(specs["rollout.top_p"].bounds) == {"gt": 0.0, "le": 1.0}
    assert specs["grpo.beta"].kind == "float" and specs["grpo.beta"].default == 0.04
    assert specs["async.enabled"].kind == "bool"  # the YAML alias, not the Python name async_
    assert specs["grpo.advantage"].kind == "choice"
    assert specs["grpo.advantage"].choices == ("grpo", "drgrpo", "rloo")
    assert specs["data.task"].nullable and specs["data.task"].kind == "str"
    assert "arithmetic" in specs["data.task"].suggestions
    assert "tiny" in specs["model.preset"].suggestions
    assert all(spec.description for spec in specs.values())
    assert specs["batch.mini_batch_prompts"].section == "batch" and specs["seed"].section == ""


def test_list_field_describes_its_items():
    rewards = next(s for s in iter_field_specs() if s.path == "rewards")
    assert rewards.kind == "list" and rewards.default == []
    items = {f.path: f for f in rewards.item_fields}
    assert items["name"].kind == "str" and items["name"].required and "exact_match" in items["name"].suggestions
    assert items["weight"].kind == "float" and items["weight"].default == 1.0


def test_sub_section_fields_are_flattened_into_their_section():
    section = next(s for s in field_specs() if s.key == "async")
    paths = [f.path for f in section.fields]
    assert paths[-5:] == [f"async.importance_sampling.{k}" for k in ("enabled", "level", "mode", "max", "min")]
    specs = {s.path: s for s in iter_field_specs()}
    level = specs["async.importance_sampling.level"]
    assert (level.kind, level.choices, level.default, level.key) == (
        "choice",
        ("token", "sequence"),
        "token",
        "importance_sampling.level",
    )
    assert level.section == "async"
    devices = specs["mesh.rollout_devices"]
    assert (devices.kind, devices.default, devices.nullable) == ("int_list", [], False)
    assert devices.section == "mesh"
    # A form sends text; the schema reads a device list from it.
    config = parse_config({"async": {"enabled": True}, "mesh": {"rollout_devices": "1, 2", "train_devices": "[0]"}})
    assert (config.mesh.rollout_devices, config.mesh.train_devices) == ([1, 2], [0])
