"""Parallelism: how a run's arrays are split over a device mesh, and how many processes form one run.

  rules.py        the one table from logical axes (embed, heads, vocab, batch, ...) to mesh axes;
                  shardings of parameters, optimizer state and batches; activation constraints
  mesh.py         the train and rollout meshes a config asks for (named axes data x fsdp x tensor)
  sizes.py        their size arithmetic (a -1 axis, the product against the devices) and MeshError,
                  JAX-free: config validation checks a mesh with it before launch
  host.py         host arrays onto a mesh (`put`: each process places its own devices' slices) and
                  back (`to_host`: gathered across processes)
  distributed.py  several processes (hosts) as one run: `initialize_from_environment` joins them
                  (GRPO_* variables, or SLURM / Open MPI / Kubernetes) before any other JAX call

The model (`trainers.models.transformer`) names the logical axes of every parameter and activation;
nothing else in the project names a mesh axis.
"""
