"""Everything that learns, by concern: `agent/` (networks, actor and critic, imagination, the learner
step), `config/` (the schema and its checks), `run/` (the training run: app, loop, collection,
updates, stop, data parallel), `io/` (checkpoints, metrics, scores, curves). Entry points at this
level: `evaluate`, `report`, `config_doc`; `runtime.setup()` prepares a process (importing a package
changes nothing)."""
