"""trainers.registry, the one registry for named things: register and look up, a duplicate refused,
"did you mean", declared names listed without importing their home module (and a home that registers
other names refused), and the one rule for dotted paths (an allow-list is decided before any import).
Expectations are written out by hand."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainers.registry import Entry, Registry, RegistryError, closest, module_allowed, split_dotted

ROOT = Path(__file__).resolve().parents[2]


def fruit_registry() -> Registry:
    fruit = Registry("fruit")

    @fruit.register("apple", metric_keys=("crunch",), colour="red")
    def apple():
        """An apple a day."""
        return "apple"

    @fruit.register("banana")
    class Banana:
        """Yellow."""

    fruit.add("cherry", ("stone",), doc="A value, with its doc given.")
    return fruit


# ---------------------------------------------------------------- register, get, names


def test_register_get_names():
    fruit = fruit_registry()
    assert fruit.names() == ("apple", "banana", "cherry")
    assert list(fruit) == ["apple", "banana", "cherry"] and len(fruit) == 3
    assert "apple" in fruit and "durian" not in fruit
    apple = fruit["apple"]
    assert apple() == "apple"  # the decorator returns the function unchanged
    assert fruit.get("apple") == Entry("apple", apple, "An apple a day.", ("crunch",), {"colour": "red"})
    assert fruit.get("banana").doc == "Yellow." and isinstance(fruit["banana"], type)
    assert fruit.get("cherry") == Entry("cherry", ("stone",), "A value, with its doc given.", (), {})
    assert [entry.name for entry in fruit.entries()] == ["apple", "banana", "cherry"]


def test_a_name_registered_twice_is_refused():
    fruit = fruit_registry()
    with pytest.raises(RegistryError, match="fruit 'apple' is registered twice"):
        fruit.register("apple")(lambda: None)
    with pytest.raises(ValueError, match="registered twice"):  # a RegistryError is a ValueError
        fruit.add("cherry", 1)


def test_an_unknown_name_suggests_the_close_one_and_lists_all():
    fruit = fruit_registry()
    with pytest.raises(RegistryError) as info:
        fruit.get("banan")
    assert str(info.value) == "unknown fruit 'banan'; did you mean 'banana'? known: apple, banana, cherry"
    with pytest.raises(ValueError) as info:
        fruit["kiwi"]
    assert str(info.value) == "unknown fruit 'kiwi'; known: apple, banana, cherry"
    assert fruit.unknown("chery") == "unknown fruit 'chery'; did you mean 'cherry'? known: apple, banana, cherry"
    assert closest("calculater", ["single_turn", "calculator"]) == "calculator"
    assert closest("zzz", ["single_turn", "calculator"]) is None


# ---------------------------------------------------------------- declared names, lazy home module


def write_package(root: Path, package: str, home_names: list[str]) -> None:
    """A package `package` with decl.py (a registry declaring "a" and "b", home: home.py) and home.py,
    which registers `home_names` and records in os.environ that it was imported."""
    (root / package).mkdir()
    (root / package / "__init__.py").write_text("")
    (root / package / "decl.py").write_text(
        textwrap.dedent(f"""\
            from trainers.registry import Registry
            THINGS = Registry("thing", names=("a", "b"), home="{package}.home")
            """)
    )
    registrations = "".join(
        f'@THINGS.register("{name}")\ndef {name}():\n    return "{name}"\n\n' for name in home_names
    )
    (root / package / "home.py").write_text(f"from {package}.decl import THINGS\n\n{registrations}")


def run_python(code: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{path}:{ROOT}"},
    )


def test_listing_declared_names_does_not_import_the_home_module(tmp_path):
    write_package(tmp_path, "lazy_things", ["a", "b"])
    out = run_python(
        """\
        import sys
        from lazy_things.decl import THINGS
        print(THINGS.names(), "a" in THINGS, list(THINGS), "lazy_things.home" in sys.modules)
        print(THINGS["b"](), "lazy_things.home" in sys.modules, [e.name for e in THINGS.entries()])
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "('a', 'b') True ['a', 'b'] False",
        "b True ['a', 'b']",
    ]


def test_the_algorithm_names_are_listed_without_jax():
    out = run_python(
        """\
        import sys
        from trainers.algo import names
        print(names.POLICY_LOSSES.names(), names.OPTIMIZERS.names())
        print(sorted(m for m in sys.modules if m in ("jax", "optax", "trainers.algo.loss", "trainers.algo.optim")))
        """,
        ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["('grpo', 'gspo', 'gspo-token', 'cispo') ('adamw', 'adam', 'sgd')", "[]"]


def test_a_declared_name_the_home_does_not_register_is_an_error(tmp_path):
    write_package(tmp_path, "missing_things", ["a"])
    out = run_python("from missing_things.decl import THINGS\nTHINGS.get('a')\n", tmp_path)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "trainers.registry.RegistryError: thing 'b' declared but not registered in missing_things.home; "
        "register each there or remove it from the declared names"
    )


def test_registering_an_undeclared_name_fails_the_home_import(tmp_path):
    write_package(tmp_path, "extra_things", ["a", "b", "c"])
    out = run_python("import extra_things.home\n", tmp_path)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "trainers.registry.RegistryError: thing 'c' is registered in extra_things.home but not declared; "
        "add it to the registry's names (declared: a, b)"
    )


def test_names_and_home_go_together():
    with pytest.raises(TypeError):
        Registry("thing", names=("a",))


def test_every_trainer_registry_registers_its_names():
    """Loading each declared registry checks its home module registered exactly the declared names."""
    from trainers.algo import names
    from trainers.data.rewards import REWARDS
    from trainers.data.tasks import TASKS
    from trainers.envs.registry import ENVIRONMENTS

    registries = (
        names.ADVANTAGES,
        names.POLICY_LOSSES,
        names.AGGREGATIONS,
        names.KL_ESTIMATORS,
        names.OPTIMIZERS,
        names.SCHEDULES,
        REWARDS,
        TASKS,
        ENVIRONMENTS,
    )
    for registry in registries:
        assert tuple(entry.name for entry in registry.entries()) == registry.names()
        assert all(entry.doc for entry in registry.entries()), registry.kind


# ---------------------------------------------------------------- dotted paths


@pytest.fixture
def widgets(tmp_path, monkeypatch):
    """A registry that accepts dotted paths, and two importable modules: reg_widgets_ok.mod (class W)
    and reg_widgets_boom, which raises when imported."""
    (tmp_path / "reg_widgets_ok").mkdir()
    (tmp_path / "reg_widgets_ok" / "__init__.py").write_text("")
    (tmp_path / "reg_widgets_ok" / "mod.py").write_text("class W:\n    pass\n")
    (tmp_path / "reg_widgets_boom.py").write_text("raise RuntimeError('reg_widgets_boom was imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("reg_widgets")]:
        monkeypatch.delitem(sys.modules, name)
    registry = Registry("widget", dotted="Widget class", allow_list_setting="WIDGET_MODULES")
    registry.add("builtin", object)
    return registry


def resolve_error(registry: Registry, name: str, allowed=None) -> str:
    with pytest.raises(RegistryError) as info:
        registry.resolve(name, allowed)
    return str(info.value)


def test_a_registered_name_and_an_allowed_module_resolve(widgets):
    assert widgets.resolve("builtin") is object and widgets.resolve("builtin", []) is object
    cls = widgets.resolve("reg_widgets_ok.mod:W", ["reg_widgets_ok"])
    assert cls.__name__ == "W" and cls.__module__ == "reg_widgets_ok.mod"
    assert widgets.resolve("reg_widgets_ok.mod.W", ["reg_widgets_ok.mod"]) is cls
    assert widgets.resolve("reg_widgets_ok.mod:W") is cls  # no allow-list (the CLI): any module


def test_a_module_outside_the_allow_list_is_refused_before_import(widgets):
    assert resolve_error(widgets, "reg_widgets_boom:X", ["reg_widgets_ok"]) == (
        "unknown widget 'reg_widgets_boom:X'; built in: builtin; or a class of the modules this "
        "server's administrator lists: reg_widgets_ok"
    )
    assert resolve_error(widgets, "reg_widgets_boom:X", []) == (
        "unknown widget 'reg_widgets_boom:X'; built in: builtin; this server runs no other widgets (its "
        "administrator lists the modules it may load in WIDGET_MODULES)"
    )
    # decided on the text: a package's name as a prefix is not the package
    assert resolve_error(widgets, "reg_widgets_ok_evil.mod:W", ["reg_widgets_ok"]).startswith("unknown widget")
    assert "reg_widgets_boom" not in sys.modules
    # without an allow-list the module is imported, and its failure is reported as such
    assert resolve_error(widgets, "reg_widgets_boom:X") == (
        "cannot import module 'reg_widgets_boom' of 'reg_widgets_boom:X': RuntimeError: reg_widgets_boom was "
        "imported; check the module is on the Python path (PYTHONPATH) and imports cleanly"
    )


def test_dotted_path_mistakes_name_the_fix(widgets):
    assert resolve_error(widgets, "bultin") == (
        "unknown widget 'bultin'; did you mean 'builtin'? built in: builtin; or your own Widget class as a "
        "dotted path package.module:Class"
    )
    assert resolve_error(widgets, ":W") == "':W' is not a dotted path; write package.module:Class"
    assert resolve_error(widgets, "reg_widgets_ok.mod:V") == (
        "module 'reg_widgets_ok.mod' has no attribute 'V'; name a class defined in it"
    )


def test_a_registry_without_dotted_paths_never_imports(widgets):
    fruit = fruit_registry()
    assert fruit.resolve("apple")() == "apple"
    assert (
        resolve_error(fruit, "reg_widgets_boom:X") == "unknown fruit 'reg_widgets_boom:X'; known: apple, banana, cherry"
    )
    assert "reg_widgets_boom" not in sys.modules


def test_split_dotted_and_module_allowed_read_text_only():
    assert split_dotted("pkg.mod:Class") == ("pkg.mod", "Class")
    assert split_dotted("pkg.mod.Class") == ("pkg.mod", "Class")
    assert split_dotted("plain") == (None, "plain")
    assert module_allowed("envs.games", ["envs"]) and module_allowed("envs", ["envs"])
    assert not module_allowed("envsx", ["envs"]) and not module_allowed(None, ["envs"]) and not module_allowed("", [""])
