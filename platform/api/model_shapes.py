"""The models endpoint's shapes (api/model_views.py): the pretrained model folders experiments may
train. See api/contract.py for how endpoints declare them."""

from __future__ import annotations

from api.contract import Shape


class ModelEntry(Shape):
    name: str
    path: str
    architecture: str
    size: str
    parameters: int
    has_chat_template: bool


class Models(Shape):
    models: list[ModelEntry]
