"""Forms of the web UI. They own validation, and all of a config's validation is the schema's
(through experiments.configs, as everywhere): these forms only collect the input and show its
messages by field."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django import forms
from django.db import transaction

from experiments import configs
from experiments.dataset_models import Dataset
from experiments.models import ConfigVersion, Experiment, text_problem
from experiments.models_dir import available_models
from experiments.shown_paths import shown_errors
from trainers.config import ConfigError, ExperimentConfig, FieldSpec, SectionSpec, field_specs
from web.config_form import (
    config_from_values,
    error_target,
    form_values,
    html_name,
    is_default,
    mapping_problem,
    specs_by_name,
    to_yaml,
)

MAX_IMPORT_BYTES = 256 * 1024  # largest YAML file accepted by the import
_BOUND_SIGNS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
NO_MODEL_LABEL = "none: a randomly initialised model.preset (toy sizes)"
# The form's basic view, open at the top: what most experiments set (model, data, rewards, G,
# batch and its mini-batch, steps, learning rate). Every other field is in a collapsed group named after its schema
# section, opened when it holds an error or a value that is not the default.
BASIC_FIELDS = (
    "model.path",
    "model.preset",
    "data.task",
    "data.train_dataset",
    "rewards",
    "grpo.num_generations",
    "batch.prompts_per_step",
    "batch.mini_batch_prompts",
    "train.max_steps",
    "optimizer.learning_rate",
)


def model_path_choices(current: Any = "", owner=None) -> list[tuple[str, str]]:
    """The `model.path` choices: none (a toy preset), then every model folder under the model roots
    by its resolved path (what the config stores), labelled "name — architecture, size"; a current
    value that is none of them stays selectable, marked, so that showing a form never changes it."""
    choices = [("", NO_MODEL_LABEL)] + [(m.path, m.label) for m in available_models()]
    current = "" if current is None else str(current)
    if current and current not in {value for value, _ in choices}:
        choices.append((current, f"{current} (not a model folder under the model roots)"))
    return choices


NO_JUDGE_LABEL = "none: no judge (the judge reward needs one)"


def judge_path_choices(current: Any = "", owner=None) -> list[tuple[str, str]]:
    """The `judge.model_path` choices: `model_path_choices`' folders, none meaning no judge."""
    return [("", NO_JUDGE_LABEL)] + model_path_choices(current, owner)[1:]


NO_DATASET_LABEL = "none: data.task (a built-in task) or data.train_path"


def dataset_choices(current: Any = "", owner=None) -> list[tuple[str, str]]:
    """The `data.train_dataset` / `data.eval_dataset` choices: none, then the datasets `owner` may
    use, as a config names them (their own by name, others' as owner/name); a current value that is
    none of them stays selectable, marked (the config then says why it is refused)."""
    rows = Dataset.objects.visible_to(owner).select_related("owner").order_by("owner__username", "name")
    own = [(d.name, f"{d.name} ({d.rows} rows)") for d in rows if owner is not None and d.owner_id == owner.pk]
    others = [
        (d.reference, f"{d.reference} ({d.rows} rows, shared)") for d in rows if owner is None or d.owner_id != owner.pk
    ]
    choices = [("", NO_DATASET_LABEL)] + own + others
    current = "" if current is None else str(current)
    if current and current not in {value for value, _ in choices}:
        choices.append((current, f"{current} (not a dataset you may use)"))
    return choices


# Fields whose choices the platform knows, not the schema: a select filled when the form is shown,
# from the current value and the experiment's owner.
PLATFORM_CHOICES: dict[str, Callable[[Any, Any], list[tuple[str, str]]]] = {
    "model.path": model_path_choices,
    "judge.model_path": judge_path_choices,
    "data.train_dataset": dataset_choices,
    "data.eval_dataset": dataset_choices,
}


def _form_field(spec: FieldSpec) -> forms.Field:
    """A lax Django field for one config field: text in, the schema judges it."""
    common = {"required": False, "label": spec.key, "help_text": spec.description}
    name = html_name(spec.path)
    if spec.path in PLATFORM_CHOICES:
        return forms.CharField(widget=forms.Select(choices=[]), **common)  # choices: ConfigForm.sections
    if spec.kind == "bool" and spec.nullable:  # three states: a checkbox would turn null into false
        choices = [("", "null (auto)"), ("true", "true"), ("false", "false")]
        return forms.CharField(widget=forms.Select(choices=choices), **common)
    if spec.kind == "bool":
        return forms.BooleanField(**common)
    if spec.kind == "choice":
        choices = [(c, c) for c in spec.choices] + ([("", "null")] if spec.nullable else [])
        return forms.CharField(widget=forms.Select(choices=choices), **common)
    if spec.kind == "list":
        return forms.CharField(strip=False, widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}), **common)
    if spec.kind == "mapping":  # a JSON object (env.settings)
        return forms.CharField(
            strip=False,
            widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "autocomplete": "off", "placeholder": "{}"}),
            **common,
        )
    if spec.multiline:  # text whose line breaks count (a system prompt): a single-line input drops them
        return forms.CharField(
            strip=False,
            widget=forms.Textarea(attrs={"rows": 4, "placeholder": "null" if spec.nullable else ""}),
            **common,
        )
    attrs = {"autocomplete": "off", "spellcheck": "false"}
    if spec.kind in ("int", "float"):
        attrs["inputmode"] = "numeric" if spec.kind == "int" else "decimal"
    if spec.nullable:
        attrs["placeholder"] = "null"
    if spec.suggestions:
        attrs["list"] = f"suggest-{name}"
    return forms.CharField(widget=forms.TextInput(attrs=attrs), **common)


def _default_text(spec: FieldSpec) -> str:
    if spec.kind == "list":
        return "none" if not spec.default else json.dumps(spec.default)
    return spec.default if isinstance(spec.default, str) else json.dumps(spec.default)


@dataclasses.dataclass
class FieldRow:
    """One config field on the page: its spec, bound field and help figures."""

    spec: FieldSpec
    field: forms.BoundField
    whole_path: bool = False  # label it `model.path`, not `path` (outside its section's group)

    @property
    def path(self) -> str:
        return self.spec.path

    @property
    def label(self) -> str:
        return self.spec.path if self.whole_path else self.spec.key

    @property
    def default_text(self) -> str:
        return _default_text(self.spec)

    @property
    def bounds_text(self) -> str:
        return ", ".join(f"{_BOUND_SIGNS[k]} {v}" for k, v in self.spec.bounds)

    @property
    def suggestions_id(self) -> str:
        return f"suggest-{html_name(self.spec.path)}" if self.spec.suggestions else ""

    @property
    def item_suggestions(self) -> list[str]:
        return [s for f in self.spec.item_fields for s in f.suggestions]

    @property
    def is_default(self) -> bool:
        """Whether the field shows its schema default (a group holding none of those stays collapsed)."""
        return is_default(self.spec, self.field.value())


@dataclasses.dataclass
class SectionView:
    spec: SectionSpec
    rows: list[FieldRow]

    @property
    def title(self) -> str:
        return self.spec.key or "experiment"

    @property
    def open(self) -> bool:
        """Shown expanded: one of its fields has an error or a value other than the default."""
        return any(row.field.errors or not row.is_default for row in self.rows)

    @property
    def intro(self) -> str:
        """The section's description, unless its one field already says the same."""
        if len(self.rows) == 1 and self.rows[0].spec.description == self.spec.description:
            return ""
        return self.spec.description


class ConfigForm(forms.Form):
    """A whole experiment config, entered field by field (mode "form") or as YAML (mode "yaml").

    After is_valid(): `config` is the validated config as plain data (what Experiment.config
    stores) and `validated` the ExperimentConfig; otherwise `config_errors` is the schema's
    {dotted.field: message}. `raw` is the unvalidated config data either way (None when the YAML
    could not be read). `owner`: the user whose datasets the config may name (the experiment's
    owner; the requesting user for a new one)."""

    MODES = (("form", "Form"), ("yaml", "YAML"))
    mode = forms.ChoiceField(choices=MODES, required=False, initial="form")
    config_yaml = forms.CharField(
        required=False,
        strip=False,
        label="YAML",
        widget=forms.Textarea(attrs={"rows": 32, "spellcheck": "false", "autocomplete": "off"}),
    )

    def __init__(self, data=None, files=None, *, config: dict[str, Any] | None = None, owner=None, **kwargs):
        self.owner = owner
        initial = form_values(config)
        initial["config_yaml"] = to_yaml(config if config is not None else config_from_values(initial))
        initial.update(kwargs.pop("initial", None) or {})
        super().__init__(data, files, initial=initial, **kwargs)
        for name, spec in specs_by_name().items():
            self.fields[name] = _form_field(spec)
        self.config: dict[str, Any] | None = None
        self.validated: ExperimentConfig | None = None
        self.config_errors: dict[str, str] = {}
        self.raw: Any = None

    @property
    def active_mode(self) -> str:
        """The tab to show: the submitted mode, else form."""
        mode = self.data.get("mode") if self.is_bound else self.initial.get("mode")
        return mode if mode in dict(self.MODES) else "form"

    def clean(self):
        data = super().clean()
        mode = data.get("mode") or "form"
        try:
            if mode == "yaml":
                self.raw = configs.load_yaml(data.get("config_yaml") or "")
            else:
                self.raw = config_from_values(data)
            config = configs.parse(self.raw, self.owner)
            stored = configs.stored(config)
        except ConfigError as exc:
            self.config_errors = shown_errors(exc.as_dict())  # server paths relative to their root
            if mode != "yaml":
                self.config_errors.update(self._mapping_problems(data))
            for key, message in self.config_errors.items():
                if mode == "yaml":
                    self.add_error("config_yaml", f"{key}: {message}")
                else:
                    target = error_target(key)
                    self.add_error(target, message if target == html_name(key) else f"{key}: {message}")
            return data
        self.validated, self.config = config, stored
        return data

    @staticmethod
    def _mapping_problems(data: dict[str, Any]) -> dict[str, str]:
        """{dotted path: message} for each mapping field (env.settings) whose text is not a JSON
        object: the schema only says "a valid dictionary"; this says what the JSON lacks."""
        problems = {}
        for name, spec in specs_by_name().items():
            if spec.kind == "mapping":
                problem = mapping_problem(data.get(name))
                if problem:
                    problems[spec.path] = problem
        return problems

    def sections(self) -> list[SectionView]:
        """The config fields by schema section, for the template (the platform's choices, such as
        the model folders for `model.path`, are read here: only when the form is shown)."""
        for path, choices in PLATFORM_CHOICES.items():
            name = html_name(path)
            self.fields[name].widget.choices = choices(self[name].value(), self.owner)
        return [
            SectionView(section, [FieldRow(spec, self[html_name(spec.path)]) for spec in section.fields])
            for section in field_specs()
        ]

    def layout(self) -> tuple[list[FieldRow], list[SectionView]]:
        """(the basic view's rows in BASIC_FIELDS order, the schema sections with their other
        fields); a section whose fields are all basic is left out of the second list."""
        sections = self.sections()
        rows = {row.path: row for section in sections for row in section.rows}
        basics = [dataclasses.replace(rows[path], whole_path=True) for path in BASIC_FIELDS if path in rows]
        groups = [SectionView(s.spec, [r for r in s.rows if r.path not in BASIC_FIELDS]) for s in sections]
        return basics, [g for g in groups if g.rows]

    def config_yaml_text(self) -> str:
        """YAML of the validated config, else of the raw input (for the tab switch)."""
        if self.config is not None:
            return to_yaml(self.config)
        return to_yaml(self.raw) if isinstance(self.raw, dict) else ""


class ExperimentForm(ConfigForm):
    """Name, description and config of an experiment; `save` stores the validated config as a
    new ConfigVersion when it changed."""

    name = forms.CharField(max_length=200)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, data=None, files=None, *, experiment: Experiment | None = None, **kwargs):
        self.experiment = experiment
        if experiment is not None:
            kwargs["owner"] = experiment.owner
            kwargs.setdefault("config", experiment.config)
            kwargs["initial"] = {
                "name": experiment.name,
                "description": experiment.description,
                **(kwargs.get("initial") or {}),
            }
        super().__init__(data, files, **kwargs)

    def _text(self, field: str) -> str:
        value = self.cleaned_data.get(field, "")
        message = text_problem(value)
        if message:
            raise forms.ValidationError(message)
        return value

    def clean_name(self) -> str:
        return self._text("name")

    def clean_description(self) -> str:
        return self._text("description")

    def save(self, user, note: str = "") -> tuple[Experiment, ConfigVersion | None]:
        """Create (owned by `user`) or update the experiment; returns it and the new version, if any."""
        assert self.config is not None, "save() needs a valid form"
        with transaction.atomic():
            experiment = self.experiment or Experiment(owner=user)
            experiment.name = self.cleaned_data["name"]
            experiment.description = self.cleaned_data.get("description", "")
            version = experiment.set_config(self.config, user=user, note=note)
        return experiment, version


class YamlImportForm(forms.Form):
    """A YAML config file to create an experiment from (at most MAX_IMPORT_BYTES, UTF-8)."""

    name = forms.CharField(max_length=200, required=False, help_text="Empty: the file's name.")
    file = forms.FileField(label="YAML file")

    def clean_file(self) -> str:
        upload = self.cleaned_data["file"]
        if upload.size > MAX_IMPORT_BYTES:
            raise forms.ValidationError(f"the file has {upload.size} bytes; the limit is {MAX_IMPORT_BYTES} bytes")
        try:
            return upload.read().decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise forms.ValidationError(f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})") from None

    def experiment_form(self, owner) -> ExperimentForm:
        """The experiment form this import amounts to for `owner` (validate it, then save it)."""
        name = self.cleaned_data.get("name") or Path(self.files["file"].name).stem[:200] or "imported"
        return ExperimentForm({"name": name, "mode": "yaml", "config_yaml": self.cleaned_data["file"]}, owner=owner)


class DiffForm(forms.Form):
    """Which two versions to compare, and how."""

    a = forms.IntegerField(min_value=1, max_value=2**31 - 1, label="from version")
    b = forms.IntegerField(min_value=1, max_value=2**31 - 1, label="to version")
    view = forms.ChoiceField(choices=(("unified", "unified"), ("side", "side by side")), required=False)


class ExportForm(forms.Form):
    """Which checkpoint of a run to export as a Hugging Face folder, and in which dtype."""

    step = forms.IntegerField(
        required=False, min_value=0, max_value=2**31 - 1, help_text="Empty: the newest checkpoint."
    )
    dtype = forms.ChoiceField(choices=[("float32", "float32"), ("bfloat16", "bfloat16")], required=False)
