"""The one guarded YAML loader of every entry point (CLI `--set`, YAML files, the web form, the API).

yaml.safe_load semantics (no object construction), after checks that cannot overflow the stack:
text length, nesting depth, and the size a document stands for once its aliases are expanded (a
450-byte "billion laughs" document would otherwise expand to gigabytes).
"""

from __future__ import annotations

from typing import Any

import yaml

from trainers.errors import ConfigError, Problem

YAML_MAX_CHARS = 1_000_000  # longest YAML text accepted
YAML_MAX_VALUES = 10_000  # values a document may stand for once aliases are expanded
MAX_NESTING = 32  # deepest nesting of mappings and lists (a config needs 3)


class YamlRefused(ValueError):
    """YAML that is well formed but refused: too long, too deep, or too large once aliases expand."""


def guarded_yaml(text: str) -> Any:
    """yaml.safe_load, after checking (without recursion, so a deep document cannot overflow the
    stack) that `text` is not too long, its nesting not too deep, and its expansion through aliases
    not too large. Raises yaml.YAMLError for malformed YAML and YamlRefused for the limits."""
    if len(text) > YAML_MAX_CHARS:
        raise YamlRefused(f"is {len(text)} characters long; the limit is {YAML_MAX_CHARS}")
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):  # the parser is iterative; the composer recurses
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_NESTING:
                raise YamlRefused(f"is nested deeper than {MAX_NESTING} levels")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        values, depth = _expanded_shape(root)
        if values > YAML_MAX_VALUES:
            raise YamlRefused(f"expands to more than {YAML_MAX_VALUES} values through aliases; write it out")
        if depth > MAX_NESTING:
            raise YamlRefused(f"is nested deeper than {MAX_NESTING} levels once aliases are expanded")
        return loader.construct_document(root)  # what yaml.safe_load returns, from the node checked
    finally:
        loader.dispose()


def _expanded_shape(root: yaml.Node) -> tuple[int, int]:
    """(values, depth) that `root` stands for once every alias is expanded, computed once per node
    (an alias is the same node object as its anchor), iteratively. A recursive alias is refused."""
    done: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in done:
            continue
        children = _yaml_children(node)
        if children_done:
            on_path.discard(id(node))
            shapes = [done[id(c)] for c in children]
            values = 1 + sum(v for v, _ in shapes)
            done[id(node)] = (min(values, YAML_MAX_VALUES + 1), 1 + max((d for _, d in shapes), default=0))
            continue
        if id(node) in on_path:
            raise YamlRefused("refers to itself (a recursive alias)")
        on_path.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in done)
    return done[id(root)]


def _yaml_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_yaml_data(text: str) -> Any:
    """YAML text -> plain data, the one guarded loader of every entry point (CLI, web form, API).

    yaml.safe_load semantics (no object construction), refusing text over YAML_MAX_CHARS, nesting
    deeper than MAX_NESTING and alias expansion beyond YAML_MAX_VALUES values. Raises ConfigError
    with a "(yaml)" problem that says what is wrong."""
    if not isinstance(text, str):
        raise ConfigError([Problem("(yaml)", f"must be text, got {type(text).__name__}")])
    try:
        return guarded_yaml(text)
    except YamlRefused as exc:
        raise ConfigError([Problem("(yaml)", f"refused: the YAML {exc}")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([Problem("(yaml)", f"not valid YAML{where}: {getattr(exc, 'problem', exc)}")]) from None
