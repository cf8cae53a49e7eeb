"""Chat prompts: validating message lists and rendering a model's Hugging Face chat template.

A chat template is a Jinja template stored with a model (`tokenizer_config.json` "chat_template" or
`chat_template.jinja`) that turns a list of messages `[{"role": "system" | "user" | "assistant",
"content": str}, ...]` into the prompt text the model was trained on, special-token strings such as
`<|im_start|>` included. `render_chat_template` renders it the way transformers'
`apply_chat_template(..., tokenize=False)` does (transformers/utils/chat_template_utils.py,
`_compile_jinja_template` and `render_jinja_template`), without importing transformers:

  * a sandboxed, immutable Jinja environment (templates come from model repositories: untrusted code),
    with trim_blocks and lstrip_blocks, the loopcontrols extension ({% break %}, {% continue %}) and a
    no-op {% generation %} ... {% endgeneration %} block (transformers uses it to mark assistant tokens);
  * globals `raise_exception(message)`, `strftime_now(format)` (local time), a limited `dict` and a
    `namespace` that refuses underscore-prefixed names; a `tojson` filter that does not escape HTML
    and takes indent / separators / sort_keys;
  * the template sees `messages`, `tools` (None), `documents` (None), `add_generation_prompt` and the
    variables given (the tokenizer's special-token strings: bos_token, eos_token, ...), all rebuilt out
    of plain JSON types; message keys whose value is None are dropped.

jinja2 is imported only inside the functions here: config validation imports trainers.data modules
and must stay free of it.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

# jinja2 releases before 3.1.6 have known sandbox escapes; chat templates are untrusted code.
MIN_JINJA2_VERSION = (3, 1, 6)


def validate_messages(value: Any) -> list[dict]:
    """Returns `value` as a chat message list, or raises ValueError naming what is wrong.

    A prompt is either a string, taken as one user message (returned as
    `[{"role": "user", "content": value}]`), or a non-empty list of messages, each a dict with a
    string "role" and a string "content" (other keys are kept, e.g. "name"). The list returned is a
    new list of new dicts; `value` is not modified.
    """
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise ValueError(
            f"a prompt must be a string or a list of messages {{\"role\": ..., \"content\": ...}}, "
            f"got {type(value).__name__} {_preview(value)}"
        )
    if not value:
        raise ValueError("the message list is empty; give at least one {\"role\", \"content\"} message")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise ValueError(
                f"message {index} must be an object with \"role\" and \"content\", "
                f"got {type(message).__name__} {_preview(message)}"
            )
        for field in ("role", "content"):
            if field not in message:
                raise ValueError(f"message {index} has no {field!r} (keys: {sorted(message)})")
            if not isinstance(message[field], str):
                hint = " (content blocks, e.g. images, are not supported: give the text)" if field == "content" else ""
                raise ValueError(
                    f"message {index}: {field!r} must be a string, got {type(message[field]).__name__} "
                    f"{_preview(message[field])}{hint}"
                )
        if not message["role"]:
            raise ValueError(f"message {index}: 'role' is empty")
        messages.append(dict(message))
    return messages


TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>\n", "\n</tool_response>"
"""How a tool message's content is wrapped (Hermes / Qwen format) by a tokenizer whose chat template
does not wrap it itself (`HFTokenizer.apply_chat_template`)."""


def conversation(prompt: Any, system_prompt: str | None = None) -> list[dict]:
    """A dataset prompt as the message list its chat rendering starts from: a string is one user
    message (`validate_messages`), and `system_prompt` (if given) goes first unless a message already
    has role "system"."""
    messages = validate_messages(prompt)
    if system_prompt is not None and not any(message["role"] == "system" for message in messages):
        messages = [{"role": "system", "content": system_prompt}] + messages
    return messages


def render_chat_template(
    template: str,
    messages: list[dict],
    *,
    add_generation_prompt: bool = True,
    **variables: Any,
) -> str:
    """Renders the chat template `template` for `messages`, as transformers' apply_chat_template.

    Args:
      template: the Jinja source of a Hugging Face chat template.
      messages: the conversation, a list of dicts (usually from `validate_messages`); keys whose value
        is None are dropped before rendering, as transformers does.
      add_generation_prompt: True appends the header that starts the assistant's reply (what a
        prompt for generation needs); False ends after the last message.
      variables: further template variables, e.g. bos_token="<s>", eos_token="</s>"; they may
        override `tools` / `documents` (None by default).

    Returns the rendered text (special tokens appear as their strings).

    Raises ValueError if the template does not parse, or fails while rendering (a
    `raise_exception(...)` call in the template, an undefined name used in an operation, ...): the
    message says which and quotes the template's own error.
    """
    if not isinstance(messages, list) or not all(isinstance(message, dict) for message in messages):
        raise ValueError(f"render_chat_template: messages must be a list of dicts, got {_preview(messages)}")
    compiled = _compile(template)
    context = {"tools": None, "documents": None, **variables}
    context = {name: _plain_data(value) for name, value in context.items()}
    plain_messages = [
        {_plain_data(key): _plain_data(value) for key, value in message.items() if value is not None}
        for message in messages
    ]
    # lazy: jinja2 only when a model folder's chat template is rendered
    import jinja2

    try:
        return compiled.render(messages=plain_messages, add_generation_prompt=bool(add_generation_prompt), **context)
    except jinja2.TemplateError as error:
        raise ValueError(f"chat template failed while rendering: {type(error).__name__}: {error}") from error
    except Exception as error:  # the template is foreign code: any Python error it triggers is its failure
        raise ValueError(f"chat template failed while rendering: {type(error).__name__}: {error}") from error


@functools.lru_cache(maxsize=16)
def _compile(template: str):
    """The compiled template (cached per template text). Raises ValueError if it does not parse."""
    # lazy: jinja2 only when a model folder's chat template is compiled
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    if not isinstance(template, str):
        raise ValueError(f"a chat template must be a string, got {type(template).__name__}")
    version = tuple(int(part) for part in jinja2.__version__.split(".")[:3] if part.isdigit())
    if version < MIN_JINJA2_VERSION:
        raise ValueError(
            f"chat templates need jinja2 >= {'.'.join(map(str, MIN_JINJA2_VERSION))} (older releases have "
            f"sandbox escapes), found {jinja2.__version__}"
        )

    class GenerationBlock(jinja2.ext.Extension):
        """`{% generation %}body{% endgeneration %}` renders as body (transformers' AssistantTracker
        also records where the body falls; the text is the same)."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

        def _render_body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # Jinja's own tojson escapes <, >, & and ' for HTML; chat templates want the JSON as is.
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    class TemplateDict:
        """`dict(...)` and `dict.fromkeys(...)` only, no access to the dict type itself."""

        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        """Jinja's namespace() refusing underscore-prefixed attribute names (no CPython internals)."""

        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attributes = dict(*args, **kwargs)
            for name in attributes:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attributes)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot store underscore-prefixed attributes on a namespace, got {name!r}"
                )

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = strftime_now
    environment.globals["dict"] = TemplateDict()
    environment.globals["namespace"] = TemplateNamespace
    try:
        return environment.from_string(template)
    except jinja2.TemplateSyntaxError as error:
        raise ValueError(f"chat template does not parse: line {error.lineno}: {error.message}") from error
    except jinja2.TemplateError as error:
        raise ValueError(f"chat template does not parse: {type(error).__name__}: {error}") from error


def _plain_data(value: Any) -> Any:
    """`value` rebuilt out of plain JSON types (str, int, float, bool, None, dict, list, tuple), so a
    template only ever sees objects whose methods the sandbox knows; anything else becomes the
    placeholder string "<TypeName>" (as transformers does)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict):
        return {_plain_data(key): _plain_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain_data(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain_data(item) for item in value)
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and type(value).__module__ == "numpy":
        return _plain_data(item())
    return f"<{type(value).__name__}>"


def _preview(value: Any, limit: int = 60) -> str:
    """repr(value), cut to about `limit` characters for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
