"""Cross-field checks: everything pydantic's per-field types cannot say. Each returns `Problem`s
naming the dotted field and what would fix it. The config stands above the packages whose names and
rules it checks against (model presets and folders, tasks, rewards, environments, mesh sizes) and
imports their JAX-free modules; none of them imports the config."""

from __future__ import annotations

import math
import re
from collections.abc import Collection

from trainers.algo.names import SEQUENCE_LEVEL_LOSSES
from trainers.config.budgets import completion_token_budget
from trainers.config.metric_names import METRIC_NAMES, is_metric_name
from trainers.config.schema import ExperimentConfig
from trainers.data.examples import READ_CHUNK_BYTES, DataError, jsonl_lines, parse_jsonl_line
from trainers.data.judge_prompt import template_problem
from trainers.data.rewards import REWARDS
from trainers.data.tasks import TASKS
from trainers.data.tokenizer import get_tokenizer
from trainers.envs.registry import EnvError, resolve, settings_problems
from trainers.errors import Problem
from trainers.models.hf_config import ModelFolderError, read_model_config
from trainers.models.lora_targets import projection_shapes, targeted
from trainers.models.presets import PRESETS
from trainers.parallel.sizes import MeshError, check_one_unknown, resolve_axis_sizes
from trainers.registry import closest


def _divisors(n: int) -> list[int]:
    """Every divisor of n >= 1, ascending, in O(sqrt(n)) steps."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def _choices(values: list[int], most: int = 24) -> str:
    """ "1, 2 or 4"; a long list keeps its first and last few values ("1, 2, 3, ..., 512 or 1024")."""
    text = [str(v) for v in values]
    if len(text) > most:
        text = text[: most - 4] + ["..."] + text[-3:]
    return text[0] if len(text) == 1 else ", ".join(text[:-1]) + " or " + text[-1]


def check_config(config: ExperimentConfig, env_modules: Collection[str] | None = None) -> list[Problem]:
    """Every cross-field rule; returns the problems (empty = valid). `env_modules`: the modules a
    dotted `env.name` may name (None: any; see `trainers.envs.registry.resolve`)."""
    problems: list[Problem] = []
    batch_problems = _check_batch(config)
    problems += batch_problems
    problems += _check_grpo(config)
    problems += _check_data_and_rewards(config)
    problems += _check_judge(config)
    problems += _check_model(config)
    problems += _check_lora(config)
    problems += _check_checkpoint(config)
    problems += _check_async(config)
    problems += _check_mesh(config, check_micro_batches=not batch_problems)
    problems += _check_cluster(config)
    problems += _check_env(config, env_modules)
    return problems


def _check_env(config: ExperimentConfig, env_modules: Collection[str] | None) -> list[Problem]:
    """env.name resolves (a built-in or an importable Environment class of `env_modules`, checked by
    name before any import), env.settings validate against
    its Settings, a multi-turn environment ends turns at EOS, and the guess_number task is played in
    its game."""

    e = config.env
    try:
        cls = resolve(e.name, env_modules)
    except EnvError as error:
        return [Problem(error.field, error.message)]
    problems = [Problem(field, message) for field, message in settings_problems(cls, e.settings)]
    if cls.multi_turn and not config.rollout.stop_at_eos:
        problems.append(
            Problem(
                "rollout.stop_at_eos",
                f"env.name={e.name} is multi-turn: an assistant turn ends "
                "at the end-of-turn token, which rollout.stop_at_eos false "
                "ignores; set rollout.stop_at_eos true (or env.name "
                "single_turn)",
            )
        )
    if config.data.task == "guess_number" and e.name != "guess_number":
        problems.append(
            Problem(
                "env.name",
                f"the guess_number task is a game over several turns; set env.name=guess_number (not {e.name})",
            )
        )
    return problems


def _check_batch(config: ExperimentConfig) -> list[Problem]:
    b, g = config.batch, config.grpo.num_generations
    problems = []
    prompts = b.prompts_per_step
    mini = b.mini_batch_prompts or prompts
    if prompts % mini:
        problems.append(
            Problem(
                "batch.mini_batch_prompts",
                f"batch.mini_batch_prompts={mini} does not divide batch.prompts_per_step={prompts}; "
                f"use {_choices(_divisors(prompts))}",
            )
        )
        return problems
    mini_sequences = mini * g
    step_sequences = prompts * g
    if b.train_micro_batch_sequences is not None and mini_sequences % b.train_micro_batch_sequences:
        problems.append(
            Problem(
                "batch.train_micro_batch_sequences",
                f"batch.train_micro_batch_sequences={b.train_micro_batch_sequences} does not divide the mini-batch of "
                f"{mini_sequences} sequences (batch.mini_batch_prompts={mini} x grpo.num_generations={g}); "
                f"use {_choices(_divisors(mini_sequences))}",
            )
        )
    for name in ("rollout_micro_batch_sequences", "logprob_micro_batch_sequences"):
        value = getattr(b, name)
        if value is not None and step_sequences % value:
            problems.append(
                Problem(
                    f"batch.{name}",
                    f"batch.{name}={value} does not divide the step's {step_sequences} sequences "
                    f"(batch.prompts_per_step={prompts} x grpo.num_generations={g}); "
                    f"use {_choices(_divisors(step_sequences))}",
                )
            )
    return problems


def _check_async(config: ExperimentConfig) -> list[Problem]:
    """Async-section rules; the range rules hold whether or not async is enabled."""
    a, prompts = config.async_, config.batch.prompts_per_step
    is_ = a.importance_sampling
    problems = []
    if a.enabled and not is_.enabled:
        problems.append(
            Problem(
                "async.importance_sampling.enabled",
                "asynchronous GRPO trains on trajectories sampled by older weights and needs the importance-sampling "
                "correction to stay unbiased; set async.importance_sampling.enabled=true (or async.enabled=false)",
            )
        )
    if is_.min >= is_.max:
        problems.append(
            Problem(
                "async.importance_sampling.min",
                f"async.importance_sampling.min={is_.min} must be below async.importance_sampling.max={is_.max}",
            )
        )
    if is_.mode == "clamp" and is_.min > 0:
        problems.append(
            Problem(
                "async.importance_sampling.min",
                f"async.importance_sampling.min={is_.min} is only used with mode mask; set it to 0 or set "
                "async.importance_sampling.mode=mask",
            )
        )
    if a.buffer_capacity_groups is not None and a.buffer_capacity_groups < prompts:
        problems.append(
            Problem(
                "async.buffer_capacity_groups",
                f"async.buffer_capacity_groups={a.buffer_capacity_groups} cannot hold one step's "
                f"batch.prompts_per_step={prompts} groups, so no step could start; use {prompts} or more, or null "
                "for the default",
            )
        )
    return problems


def _listed(values: list[int]) -> str:
    """ "1", "1 and 3", "1, 2 and 3"."""
    return _choices(values).replace(" or ", " and ")


def _check_mesh(config: ExperimentConfig, check_micro_batches: bool = True) -> list[Problem]:
    """Mesh-section rules that need no devices (the run checks the rest when it starts:
    `trainers.parallel.mesh.meshes_for`): sizes, device lists, the model's split by tensor, and the
    micro-batches' split over data x fsdp (when the sizes are known: no -1, or mesh.train_devices)."""

    m = config.mesh
    sizes = {"data": m.data, "fsdp": m.fsdp, "tensor": m.tensor}
    problems = []
    for name, size in sizes.items():
        if size == 0:
            problems.append(
                Problem(
                    f"mesh.{name}",
                    f"mesh.{name}=0: an axis needs at least one device; use 1 (not "
                    "split), 2 or more, or -1 (the rest of the devices)",
                )
            )
    try:
        check_one_unknown(sizes)
    except MeshError as exc:
        problems.append(Problem(exc.field, exc.message))
    for name in ("train_devices", "rollout_devices"):
        devices = getattr(m, name)
        repeated = sorted({d for d in devices if devices.count(d) > 1})
        if repeated:
            problems.append(
                Problem(f"mesh.{name}", f"lists device {_listed(repeated)} more than once; list each device once")
            )
    shared = sorted(set(m.train_devices) & set(m.rollout_devices))
    if shared:
        problems.append(
            Problem(
                "mesh.rollout_devices",
                f"device {_listed(shared)} is in both mesh.train_devices and mesh.rollout_devices; give training and "
                "generation disjoint devices",
            )
        )
    if m.rollout_devices and not config.async_.enabled:
        problems.append(
            Problem(
                "mesh.rollout_devices",
                "generating on devices of its own is asynchronous GRPO; set async.enabled=true, or leave "
                "mesh.rollout_devices empty to generate on the train mesh",
            )
        )
    if m.rollout_tensor > 1 and not m.rollout_devices:
        problems.append(
            Problem(
                "mesh.rollout_tensor",
                f"mesh.rollout_tensor={m.rollout_tensor} applies only to generation on devices of its own; list them "
                "in mesh.rollout_devices (asynchronous GRPO), or set it to 1 (generation on the train mesh splits "
                "by mesh.tensor)",
            )
        )
    elif m.rollout_devices and len(m.rollout_devices) % m.rollout_tensor:
        problems.append(
            Problem(
                "mesh.rollout_tensor",
                f"mesh.rollout_tensor={m.rollout_tensor} does not divide the {len(m.rollout_devices)} devices of "
                f"mesh.rollout_devices; use {_choices(_divisors(len(m.rollout_devices)))}, or list a multiple of "
                f"{m.rollout_tensor} devices",
            )
        )
    if problems:
        return problems
    if m.train_devices:
        try:
            sizes = resolve_axis_sizes(sizes, len(m.train_devices), devices_field="mesh.train_devices")
        except MeshError as exc:
            return [Problem(exc.field, exc.message)]
    tensor_shown = f"mesh.tensor={m.tensor}" + (" (the rest of mesh.train_devices)" if m.tensor == -1 else "")
    problems += _check_tensor_split(config, "mesh.tensor", sizes["tensor"], tensor_shown)
    if m.rollout_devices:
        problems += _check_tensor_split(
            config, "mesh.rollout_tensor", m.rollout_tensor, f"mesh.rollout_tensor={m.rollout_tensor}"
        )
    if check_micro_batches:
        problems += _check_micro_batch_split(config, sizes)
    return problems


def _check_cluster(config: ExperimentConfig) -> list[Problem]:
    """A run over cluster.hosts processes: its mesh must span every host's devices (hosts x
    devices_per_host, when the mesh's size is known: no -1 axis), and it trains synchronously."""
    c, m = config.cluster, config.mesh
    if c.hosts == 1:
        return []
    problems = []
    if config.async_.enabled:
        problems.append(
            Problem(
                "cluster.hosts",
                f"cluster.hosts={c.hosts}: asynchronous GRPO runs in one process; "
                "set async.enabled=false, or cluster.hosts=1",
            )
        )
    if -1 in (m.data, m.fsdp, m.tensor) or m.train_devices:
        return problems  # the run resolves the mesh on the devices it finds
    mesh_devices = m.data * m.fsdp * m.tensor
    shown = f"mesh.data {m.data} x mesh.fsdp {m.fsdp} x mesh.tensor {m.tensor} = {mesh_devices} device(s)"
    if c.devices_per_host is not None and mesh_devices != c.hosts * c.devices_per_host:
        problems.append(
            Problem(
                "cluster.devices_per_host",
                f"cluster.hosts={c.hosts} x cluster.devices_per_host={c.devices_per_host} = "
                f"{c.hosts * c.devices_per_host} devices, but the mesh has {shown}; make them equal "
                "(e.g. mesh.fsdp=-1: the mesh takes every device)",
            )
        )
    elif c.devices_per_host is None and mesh_devices % c.hosts:
        problems.append(
            Problem(
                "cluster.hosts",
                f"cluster.hosts={c.hosts} hosts cannot split a mesh of {shown} evenly; use a mesh that spans every "
                "host's devices (e.g. mesh.fsdp=-1)",
            )
        )
    return problems


def _model_shape(config: ExperimentConfig):
    """The model's `ModelConfig` (preset, or model.path's config.json) as `policy.model_config_for`
    reads it; None when it cannot be read (the folder's own problem is reported by `loading`)."""

    if config.model.path is None:
        return PRESETS.get(config.model.preset)

    try:
        return read_model_config(config.model.path)
    except (ModelFolderError, OSError):
        return None


def _check_tensor_split(config: ExperimentConfig, field: str, tensor: int, shown: str) -> list[Problem]:
    """Tensor parallelism splits attention by heads (and KV heads), the MLP by its width and the LM
    head by the vocabulary: each must divide by `tensor` (-1, not yet known: not checked). `shown`:
    the field as the message names it ("mesh.tensor=2")."""
    shape = _model_shape(config) if tensor > 1 else None
    if shape is None:
        return []
    dims = {
        "attention heads": shape.num_heads,
        "KV heads": shape.num_kv_heads,
        "MLP width": shape.mlp_size,
        "vocabulary": shape.vocab_size,
    }
    uneven = [f"{name} ({size})" for name, size in dims.items() if size % tensor]
    if not uneven:
        return []
    model = (
        f"model.preset '{config.model.preset}'"
        if config.model.path is None
        else "the model of model.path (its config.json)"
    )
    common = math.gcd(*dims.values())
    return [
        Problem(
            field,
            f"{shown}: {tensor} does not divide the {_listed(uneven)} of {model}; tensor "
            "parallelism splits attention by heads, the MLP by its width and the LM head by the "
            f"vocabulary; use {_choices(_divisors(common))}",
        )
    ]


def _check_micro_batch_split(config: ExperimentConfig, sizes: dict[str, int]) -> list[Problem]:
    """Each micro-batch is split over the devices of its mesh's data and fsdp axes: the train and
    log-prob micro-batches over the train mesh's data x fsdp, the rollout micro-batch over the
    rollout mesh's data axis (len(mesh.rollout_devices) / mesh.rollout_tensor), or over the train
    mesh's data x fsdp when generation runs there. A size still -1 (no mesh.train_devices) is not checked."""
    m, b, g = config.mesh, config.batch, config.grpo.num_generations
    prompts = b.prompts_per_step
    mini_sequences = (b.mini_batch_prompts or prompts) * g
    train_micro = b.train_micro_batch_sequences or mini_sequences
    train_split = None
    if sizes["data"] != -1 and sizes["fsdp"] != -1:
        train_split = (
            sizes["data"] * sizes["fsdp"],
            f"the train mesh's data x fsdp (mesh.data {sizes['data']} x mesh.fsdp {sizes['fsdp']})",
            "data x fsdp =",
        )
    rollout_split = train_split
    if m.rollout_devices:
        rollout_split = (
            len(m.rollout_devices) // m.rollout_tensor,
            f"the rollout mesh's data axis ({len(m.rollout_devices)} mesh.rollout_devices / "
            f"mesh.rollout_tensor {m.rollout_tensor})",
            "a rollout data axis of",
        )
    micro_batches = (
        ("train_micro_batch_sequences", train_micro, f"the mini-batch, {mini_sequences} sequences", train_split),
        (
            "logprob_micro_batch_sequences",
            b.logprob_micro_batch_sequences or train_micro,
            f"the train micro-batch, {train_micro} sequences",
            train_split,
        ),
        (
            "rollout_micro_batch_sequences",
            b.rollout_micro_batch_sequences or prompts * g,
            f"the whole step, {prompts * g} sequences",
            rollout_split,
        ),
    )
    problems = []
    for name, sequences, default, split in micro_batches:
        if split is None or sequences % split[0] == 0:
            continue
        devices, where, axes = split
        value = getattr(b, name)
        if name == "logprob_micro_batch_sequences" and value is None and problems:
            continue  # the train micro-batch's problem (its fix is this one's)
        shown = f"batch.{name}={value}" if value is not None else f"batch.{name}=null ({default})"
        problems.append(
            Problem(
                f"batch.{name}",
                f"{shown}: micro-batches of {sequences} sequences cannot be split evenly over the {devices} devices of "
                f"{where}; make batch.{name} a multiple of {devices}, or use {axes} "
                f"{_choices([d for d in _divisors(sequences) if d <= devices])}",
            )
        )
    return problems


def _check_grpo(config: ExperimentConfig) -> list[Problem]:
    g = config.grpo
    problems = []
    if g.num_generations < 2:
        problems.append(
            Problem(
                "grpo.num_generations",
                f"grpo.num_generations={g.num_generations}: group-relative advantages need at least 2 completions "
                "per prompt; use 2 or more (8 is typical)",
            )
        )
    if config.rollout.temperature == 0:
        problems.append(
            Problem(
                "rollout.temperature",
                "rollout.temperature=0 samples greedily, so all G completions of a prompt are the same, every "
                "group's advantage is 0 and nothing is learned; use a temperature > 0 (1.0 is typical; "
                "eval.temperature=0 gives greedy evaluation)",
            )
        )
    if g.dual_clip is not None and g.dual_clip <= 1.0:
        problems.append(
            Problem("grpo.dual_clip", f"grpo.dual_clip={g.dual_clip} must be > 1 (3.0 is typical), or null")
        )
    if g.dual_clip is not None and g.policy_loss != "grpo":
        problems.append(
            Problem(
                "grpo.dual_clip",
                f"the dual clip bounds the grpo loss's surrogate; grpo.policy_loss="
                f"{g.policy_loss} has none: set grpo.dual_clip to null",
            )
        )
    if g.policy_loss in SEQUENCE_LEVEL_LOSSES and g.loss_aggregation.startswith("seq-mean-token-sum"):
        problems.append(
            Problem(
                "grpo.loss_aggregation",
                f"grpo.policy_loss={g.policy_loss} puts one sequence-level ratio on every token of a completion; "
                f"summing it over the tokens ({g.loss_aggregation}) would weigh each completion by its length; use "
                "seq-mean-token-mean (GSPO's own) or token-mean",
            )
        )
    problems += _check_dynamic_sampling(config)
    problems += _check_prompt_selection(config)
    problems += _check_overlong(config)
    e = config.eval
    if e.pass_k is not None and e.pass_k > e.samples_per_prompt:
        problems.append(
            Problem(
                "eval.pass_k",
                f"eval.pass_k={e.pass_k} needs at least that many samples per prompt; "
                f"raise eval.samples_per_prompt (now {e.samples_per_prompt}) to "
                f"{e.pass_k} or more, or lower eval.pass_k",
            )
        )
    return problems


def _check_dynamic_sampling(config: ExperimentConfig) -> list[Problem]:
    r, g = config.rollout, config.grpo
    if not r.dynamic_sampling:
        return []
    if g.num_generations < 2:
        return [
            Problem(
                "rollout.dynamic_sampling",
                f"dynamic sampling drops groups whose rewards are all equal; with "
                f"grpo.num_generations={g.num_generations} every group is, so no "
                "step could fill: use G >= 2 or turn dynamic sampling off",
            )
        ]
    if r.dynamic_sampling_max_rounds == 0:
        return [
            Problem(
                "rollout.dynamic_sampling_max_rounds",
                "0 extra rounds means no group dropped could ever be replaced: dynamic sampling would only "
                "shrink the batch; use 1 or more (4 is typical), or turn rollout.dynamic_sampling off",
            )
        ]
    return []


def _check_prompt_selection(config: ExperimentConfig) -> list[Problem]:
    r, g = config.rollout, config.grpo
    if not r.prompt_selection:
        return []
    if g.num_generations < 2:
        return [
            Problem(
                "rollout.prompt_selection",
                f"prompt selection skips prompts whose groups were flat; with grpo.num_generations={g.num_generations} "
                "every group is, so every prompt would soon be skipped: use G >= 2 or turn prompt selection off",
            )
        ]
    if config.async_.enabled:
        return [
            Problem(
                "rollout.prompt_selection",
                "prompt selection decides which prompts to generate from the groups trained so far, which an "
                "asynchronous collector runs ahead of; turn async.enabled off or rollout.prompt_selection off",
            )
        ]
    return []


def _check_overlong(config: ExperimentConfig) -> list[Problem]:

    r = config.rollout
    problems = []
    budget = completion_token_budget(config)
    if r.overlong_buffer_tokens and r.overlong_buffer_tokens >= budget:
        problems.append(
            Problem(
                "rollout.overlong_buffer_tokens",
                f"rollout.overlong_buffer_tokens={r.overlong_buffer_tokens} must be below the completion budget of "
                f"{budget} tokens (rollout.max_new_tokens), so that shorter completions go unpunished; DAPO uses a "
                "fifth of it",
            )
        )
    if (r.overlong_filter or r.overlong_buffer_tokens) and not r.stop_at_eos:
        field = "rollout.overlong_filter" if r.overlong_filter else "rollout.overlong_buffer_tokens"
        problems.append(
            Problem(
                field,
                "with rollout.stop_at_eos false every completion runs to max_new_tokens, so "
                "every one would count as overlong; set rollout.stop_at_eos true",
            )
        )
    return problems


def _check_lora(config: ExperimentConfig) -> list[Problem]:
    """model.lora: a regex that matches a projection of this model, a rank no layer is too small for."""

    lora = config.model.lora
    if lora.rank == 0:
        return []
    if lora.dropout != 0.0:
        return [
            Problem(
                "model.lora.dropout",
                f"model.lora.dropout={lora.dropout}: only 0 is supported for now "
                "(Qwix's LoRA dropout needs random state the trainer does not "
                "carry); set it to 0",
            )
        ]
    cfg = _model_shape(config)
    if cfg is None:  # the model itself has a problem of its own
        return []
    try:
        chosen = targeted(cfg, lora.target_modules)
    except re.error as error:
        return [Problem("model.lora.target_modules", f"{lora.target_modules!r} is not a regular expression: {error}")]
    if not chosen:
        examples = ", ".join(list(projection_shapes(cfg))[:7])
        return [
            Problem(
                "model.lora.target_modules",
                f"{lora.target_modules!r} matches no projection of this model; module paths look like {examples}",
            )
        ]
    path, (fan_in, fan_out) = min(chosen.items(), key=lambda item: min(item[1]))
    if lora.rank > min(fan_in, fan_out):
        return [
            Problem(
                "model.lora.rank",
                f"model.lora.rank={lora.rank} is larger than {path} ({fan_in} x "
                f"{fan_out}); use at most {min(fan_in, fan_out)}",
            )
        ]
    return []


def _check_data_and_rewards(config: ExperimentConfig) -> list[Problem]:

    d = config.data
    problems = []
    if d.task is not None and d.train_path is not None:
        problems.append(
            Problem(
                "data.task",
                "set either data.task or a JSONL file (data.train_path or, on the "
                "platform, data.train_dataset), not both (clear data.task: a JSONL "
                "file alone means JSONL)",
            )
        )
    elif d.task is None and d.train_path is None and d.train_dataset is None:  # an unresolved name: its own problem
        problems.append(
            Problem(
                "data.task",
                "no data: name a built-in task, or set data.train_path to a JSONL file "
                "(on the platform: data.train_dataset to an uploaded dataset)",
            )
        )
    if d.task is not None and d.task not in TASKS:
        problems.append(Problem("data.task", f"unknown task '{d.task}'; {_one_of(d.task, sorted(TASKS.names()))}"))
    if d.task is None and not config.rewards:
        problems.append(
            Problem(
                "rewards",
                "is empty; with data.train_path name at least one reward, e.g. [{name: exact_match, weight: 1.0}]",
            )
        )
    for i, spec in enumerate(config.rewards):
        if spec.name not in REWARDS:
            problems.append(
                Problem(f"rewards[{i}].name", f"unknown reward '{spec.name}'; {_one_of(spec.name, REWARDS.names())}")
            )
    if config.rewards and all(spec.weight == 0 for spec in config.rewards):
        problems.append(
            Problem("rewards", "every weight is 0, so nothing is learned; give one reward a non-zero weight")
        )
    return problems


def _check_judge(config: ExperimentConfig) -> list[Problem]:
    """The judge section, when the `judge` reward is listed: a judge folder is named (the folder itself
    is checked where paths are resolved, `loading`), and its template shows the judge the completion."""
    if not config.lists_reward("judge"):
        return []
    j = config.judge
    problems = []
    if j.model_path is None:
        problems.append(
            Problem(
                "judge.model_path",
                "the judge reward needs a judge model; set judge.model_path to a local Hugging Face model "
                "folder (e.g. var/models/smollm2-135m-instruct), or drop the judge reward",
            )
        )
    if j.template is not None and (problem := template_problem(j.template)) is not None:
        problems.append(Problem("judge.template", problem))
    return problems


def _check_model(config: ExperimentConfig) -> list[Problem]:

    m, d = config.model, config.data
    if d.system_prompt is not None and (m.path is None or d.chat_template is False):
        return [
            Problem(
                "data.system_prompt",
                "a system prompt goes into the chat template; it needs model.path "
                "and data.chat_template true or null (clear the system prompt, or "
                "turn the template on)",
            )
        ]
    if m.path is not None:  # the folder itself is checked where paths are resolved (`loading`)
        if d.tokenizer == "char":
            return [
                Problem(
                    "data.tokenizer",
                    "the 'char' tokenizer's ids are not the model's vocabulary; use auto "
                    "(the model folder's own tokenizer)",
                )
            ]
        return []
    if d.tokenizer == "model":
        return [Problem("data.tokenizer", "'model' needs a model folder; set model.path, or use auto")]
    if d.chat_template:
        return [
            Problem(
                "data.chat_template",
                "the built-in character tokenizer has no chat template; set "
                "model.path to a model folder that has one, or leave this null",
            )
        ]
    if m.preset not in PRESETS:
        return [Problem("model.preset", f"unknown preset '{m.preset}'; {_one_of(m.preset, sorted(PRESETS))}")]
    vocab_tokens = get_tokenizer("char").vocab_size
    if PRESETS[m.preset].vocab_size < vocab_tokens:
        return [
            Problem(
                "model.preset",
                f"preset '{m.preset}' has vocab {PRESETS[m.preset].vocab_size} < the tokenizer's {vocab_tokens}; "
                "pick a larger preset",
            )
        ]
    return []


FIRST_EXAMPLE_LINES = 64  # check_prompt_format reads at most this many lines (each at most MAX_LINE_BYTES)
CHAT_NEEDS_TEMPLATE = (
    "its prompts are chat messages (a list of {{role, content}}), which need a chat template; "
    "the built-in character tokenizer of model.preset '{preset}' has none: use a dataset whose "
    "prompts are strings, or set model.path to a model folder with a chat template"
)


def check_prompt_format(config: ExperimentConfig) -> list[Problem]:
    """The data files' first example against the tokenizer: a chat-message prompt needs a chat
    template, which a `model.preset` (the character tokenizer) lacks. Reads the first non-blank
    line of data.train_path / data.eval_path (bounded: FIRST_EXAMPLE_LINES lines of at most
    MAX_LINE_BYTES); a file that cannot be read or parsed is left to the loader's own message.
    Call it only once the paths are accepted (`loading.parse_config` does): it opens the files.
    The problem names data.train_dataset / data.eval_dataset where the file came from a name."""
    d = config.data
    if config.model.path is not None:
        return []
    problems = []
    for path, path_field, name_field in (
        (d.train_path, "data.train_path", "data.train_dataset"),
        (d.eval_path, "data.eval_path", "data.eval_dataset"),
    ):
        if path is None or not isinstance(_first_prompt(path), list):
            continue
        field = name_field if getattr(d, name_field.split(".")[1]) else path_field
        problems.append(Problem(field, CHAT_NEEDS_TEMPLATE.format(preset=config.model.preset)))
    return problems


def _first_prompt(path: str):
    """The "prompt" of the file's first example, or None (no file, no example, a bad line)."""

    try:
        with open(path, "rb") as stream:
            chunks = iter(lambda: stream.read(READ_CHUNK_BYTES), b"")
            for _, (line, size_bytes) in zip(range(FIRST_EXAMPLE_LINES), jsonl_lines(chunks)):
                example = parse_jsonl_line(line, size_bytes)
                if example is not None:
                    return example["prompt"]
    except (OSError, DataError):
        return None
    return None


def _check_checkpoint(config: ExperimentConfig) -> list[Problem]:

    metric = config.checkpoint.keep_best_metric
    if metric is not None and not is_metric_name(metric):
        return [Problem("checkpoint.keep_best_metric", f"unknown metric '{metric}'; {_one_of(metric, METRIC_NAMES)}")]
    if metric is not None and metric.startswith("eval/") and config.eval.every_steps == 0:
        return [
            Problem(
                "checkpoint.keep_best_metric",
                f"'{metric}' is only measured with evaluation on; set eval.every_steps > 0 or pick a training metric",
            )
        ]
    return []


def _one_of(value: str, names: list[str] | tuple[str, ...]) -> str:
    near = closest(value, names)
    return (f"did you mean '{near}'? " if near else "") + "choose one of: " + ", ".join(names)
