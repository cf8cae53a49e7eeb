"""The arithmetic of mesh sizes, JAX-free: config validation (`trainers.config.checks`) checks a
mesh before launch with the same rules that `mesh.meshes_for` applies when the devices are known.

A mesh's axes are named data x fsdp x tensor; one size may be -1, "the rest of the devices".
"""

from __future__ import annotations

import math

from trainers.errors import FieldError


class MeshError(FieldError):
    """A mesh that the config or the visible devices cannot form (`field`, `message`: see FieldError)."""


def check_one_unknown(sizes: dict[str, int], field: str = "mesh") -> None:
    """Raises MeshError naming the second axis when more than one size is -1."""
    unknown = [name for name, n in sizes.items() if n == -1]
    if len(unknown) > 1:
        raise MeshError(
            f"{field}.{unknown[1]}",
            f"only one axis may be -1 (the rest of the devices); "
            f"{' and '.join(f'{field}.{name}' for name in unknown)} are; give the others a size",
        )


def resolve_axis_sizes(
    sizes: dict[str, int], device_count: int, field: str = "mesh", devices_field: str | None = None
) -> dict[str, int]:
    """{axis: size} with a -1 replaced by device_count / (product of the others). Raises MeshError
    when the sizes' product is not device_count. `devices_field`: the config field the devices come
    from (e.g. "mesh.train_devices"), named by the message and by the error when the product differs."""
    check_one_unknown(sizes, field)
    where = f" of {devices_field}" if devices_field else ""
    unknown = [name for name, n in sizes.items() if n == -1]
    known = math.prod(n for n in sizes.values() if n != -1)
    if unknown:
        if device_count % known:
            others = " x ".join(f"{name} {n}" for name, n in sizes.items() if name != unknown[0])
            raise MeshError(
                f"{field}.{unknown[0]}",
                f"-1 has no size: {others} = {known} does not divide the "
                f"{device_count} devices{where}; choose sizes whose product divides {device_count}",
            )
        return {**sizes, unknown[0]: device_count // known}
    if known != device_count:
        product = " x ".join(f"{name} {n}" for name, n in sizes.items())
        raise MeshError(
            devices_field or field,
            f"{product} = {known}, not the {device_count} devices{where}; "
            f"make the product {device_count} (or set one axis to -1)",
        )
    return dict(sizes)
