"""Names `vulture` cannot see used, each with the reason (`vulture` reads this file with gputrain/ and tests/).

Reached only by the framework or by a string: never delete one of these because vulture reports it. A name
that is really dead is deleted from the code, not added here.
"""
# ruff: noqa

_: object

# The Backend interface: defaults every backend inherits; the table loads classes from "module:Class" strings.
_.list_jobs  # Backend.list_jobs (gputrain/backends/base.py), the interface's default
RunPodBackend  # gputrain/backends/table.py: "gputrain.backends.runpod.backend:RunPodBackend"
ToyBackend  # tests/unit/test_backend_interface.py: loaded by the test's table row, a string

# Typer/click: commands named in gputrain.cli.app.COMMANDS (strings), hooks click calls.
clusters  # COMMANDS: ("clusters", "gputrain.cli.slurm", "clusters")
_.list_commands  # click.Group hook (gputrain/cli/app.py LazyGroup)
_.format_commands  # click.Group hook
noop  # tests/unit/test_logs_cli.py: a command registered for the test app

# Records of outside data (API answers, scheduler output, JSON files): every field is part of the format, shown in
# --json or written to a file, whether or not a module reads it back.
started_at  # RunPod pod (gputrain/backends/runpod/pods.py)
raw_state  # SlurmJob: Slurm's own state word (gputrain/backends/slurm_parse.py)
gres_name  # ClusterGres: sinfo's GRES name (gputrain/hardware/detect.py)
constraint  # cluster profile field (gputrain/contract/cluster.py)
decided_on  # KernelChoice: catalog or detected, in plan.json and the job summary (gputrain/contract/kernels.py)
steps_timed  # perf.json fields (gputrain/contract/perf.py)
tokens_per_s
peak_memory_kind
cpu_seconds
host_rss_gib
updated_at  # registry column (gputrain/registry/store.py)
STANDARD_KEYS  # logs/schema.py: the metrics.jsonl key table its docstring documents
noise_schedule  # recipe algorithm fields: documented in the JSON Schema (gputrain schema)
chromatic_weight
shown_test  # code task fields (gputrain/train/code_reward/tasks.py)
memory_mb  # sandbox limits (gputrain/train/sandbox/config.py)
file_size_mb
_.dense_chunks  # LogScanner state persisted in .summary_state.json (gputrain/logs/scan.py)
Aggregation  # typing aliases that name TRL's settings (gputrain/train/grpo/advantages.py)
ScaleRewards
PR_SET_PDEATHSIG  # the prctl constant table of gputrain/train/sandbox/confine.py

# Attributes set on other libraries' objects (read by them).
_.pod_run  # Up.pod_run: the signal handler's handle on the live run (gputrain/backends/runpod/up.py)
_.row_factory  # sqlite3.Connection
_.pre_tokenizer  # tokenizers.Tokenizer
_.decoder
_.use_cache  # transformers config
_.truncation_side  # transformers tokenizer
_.bos_token  # transformers tokenizer (the chat templates read it: tests/unit/test_math_answer_format.py)
_.allow_tf32  # torch.backends flags
_.current_gradient_accumulation_steps  # TRL trainer attribute (tests/unit/test_grpo_loss_vs_trl.py)
_.use_bias_correction_kl
_.no_repeat_ngram_size  # transformers generation config
_.daemon_threads  # socketserver
_.close_connection  # http.server handler
protocol_version  # http.server handler
_.log_message
_.do_HEAD
_.do_GET
_.do_POST
_.do_DELETE
_.gateway  # xdist WorkerController attribute the scheduler logs (tests/unit/test_slot_scheduling.py)
_.send_runtest_some  # xdist WorkerController method the scheduler calls
