"""The JSON API's models endpoint: the pretrained model folders experiments may train
(experiments.models_dir); the shapes are api/model_shapes.py.

    GET  models     the model folders under the model roots
"""

from __future__ import annotations

from api import model_shapes as shapes
from api.contract import Op, operations
from api.endpoint import api_endpoint
from experiments.models_dir import available_models


@operations(
    GET=Op(responses={200: shapes.Models}),
)
@api_endpoint("GET")
def models(request):
    """The pretrained models experiments may train (`model.path`): {"models": [{"name", "path",
    "architecture", "size", "parameters", "has_chat_template"}]}; `path` is the value to give
    (relative to the first model root, as stored configs name it: no server directory)."""
    return shapes.Models(models=[shapes.ModelEntry(**m.as_json()) for m in available_models()])
