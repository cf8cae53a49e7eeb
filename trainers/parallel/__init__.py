"""Parallelism: how a run's arrays are split over a device mesh, and how many processes form one run.

  rules.py        the one table from logical axes (embed, heads, vocab, batch, ...) to mesh axes;
                  shardings of parameters, optimizer state and batches; activation constraints
  mesh.py         the train and rollout meshes a config asks for (named axes data x fsdp x tensor)
  sizes.py        their size arithmetic (a -1 axis, the product against the devices) and MeshError,
                  JAX-free: config validation checks a mesh with it before launch

The model (`trainers.models.transformer`) names the logical axes of every parameter and activation;
nothing else in the project names a mesh axis.
"""
