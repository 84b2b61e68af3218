"""The collector benchmark runs end to end and prints its table (figures are not asserted)."""
import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_collector_bench_prints_table():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.collector", "--steps", "128", "--warmup", "64",
         "--frames-per-batch", "32", "--chunks", "1,16"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("| chunk")):]
    assert table == lines[-len(table):], "the table must print last"
    assert table[0].startswith("| chunk | steps/s | driver CPU ms/step")
    rows = {line.split("|")[1].strip(): line for line in table[2:]}
    assert set(rows) == {"1", "16", "env only (no collector)"}
    assert "1.0x" in rows["1"]


@pytest.mark.slow
def test_learner_bench_prints_sampling_then_learner_table(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.learner", "--size", "tiny", "--batch", "2", "--length", "8",
         "--updates", "1", "--sampling-shapes", "2x8,3x4", "--sampling-updates", "1",
         "--json", str(tmp_path / "bench.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-3].startswith("| learner | app ms/update")
    assert lines[-1].startswith("| eager fp32 |")
    head = lines.index(next(line for line in lines if line.startswith("| batch | sample ms | update ms")))
    assert [line.split("|")[1].strip() for line in lines[head + 2:head + 4]] == ["2 x 8", "3 x 4"]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert [(r["batch"], r["length"]) for r in result["sampling"]] == [(2, 8), (3, 4)]
    for row in result["sampling"]:
        assert all(row[k] > 0 for k in ("sample_ms", "update_ms", "loop_ms", "loop_prefetch_ms"))
    assert result["learner"][0]["mode"] == "eager" and result["learner"][0]["app_first_s"] > 0


def test_soak_slope_is_measured_over_the_second_half():
    from benchmarks.soak import slope_per_hour

    flat_then_growing = [{"t_s": t, "mb": 100.0 if t < 50 else 100.0 + (t - 50) / 36} for t in range(0, 101, 10)]
    assert slope_per_hour(flat_then_growing, "mb") == pytest.approx(100.0)  # 1 MB per 36 s
    assert slope_per_hour([{"t_s": 0, "mb": 5.0}], "mb") != slope_per_hour([{"t_s": 0, "mb": 5.0}], "mb")  # nan


def test_learning_benchmark_reads_the_preset_task_and_measures_random_returns():
    from benchmarks.learning import preset_env, random_return

    def fields(env):
        return env.name, env.action_repeat, env.obs

    assert fields(preset_env("learn_cpu", [])) == ("dmc_cartpole_swingup", 2, "proprio")
    assert fields(preset_env("learn_cpu", ["env.action_repeat=4"])) == ("dmc_cartpole_swingup", 4, "proprio")
    assert fields(preset_env("quick", [])) == ("dmc_cartpole_balance", 2, "proprio")
    assert fields(preset_env("learn_cartpole", [])) == ("gym_CartPole-v1", 1, "proprio")
    cartpole, _ = random_return(preset_env("learn_cartpole", []), episodes=10)
    assert 10 < cartpole < 40  # CartPole-v1's random policy: ~22
    mean, std = random_return(preset_env("learn_cpu", ["env.action_repeat=8"]), episodes=2)
    assert 0 < mean < 400 and std >= 0


def test_learning_benchmark_compares_with_the_official_median_at_the_same_frames():
    """benchmarks/reference/ holds the official score file's curves: 5 seeds of dmc_proprio
    cartpole_swingup, median 199 at 20k, 261 at 30k (197-293), 512 at 100k env frames."""
    from benchmarks.learning import format_table, reference_at

    at_30k = reference_at("dmc_proprio", "cartpole_swingup", 30_000)
    assert at_30k["seeds"] == 5 and round(at_30k["median"]) == 261
    assert (round(at_30k["min"]), round(at_30k["max"])) == (197, 293)
    assert round(reference_at("dmc_proprio", "cartpole_swingup", 20_000)["median"]) == 199
    assert round(reference_at("dmc_proprio", "cartpole_swingup", 100_000)["median"]) == 512
    assert reference_at("dmc_vision", "cartpole_swingup", 30_000) is None  # not checked in
    table = format_table("dmc_cartpole_swingup", 30_000, [300.0, 250.0, 280.0], 55.3, at_30k)
    assert "| final eval | 300, 250, 280 | 280.0 |" in table and "261.3 (197-293, 5 seeds)" in table
    assert "| 1.07x |" in table and "training episodes in" not in table


def test_learning_benchmark_measures_training_episodes_as_the_official_score_files_do():
    """The official score files are training-episode returns averaged over 10,000-frame bins, each
    plotted at its end (official plot.py): our runs get a row measured the same way."""
    from benchmarks.learning import bin_mean, format_table, reference_at, reference_bin

    width = reference_bin("dmc_proprio", "cartpole_swingup")
    assert width == 10_000 and reference_bin("dmc_vision", "cartpole_swingup") is None
    xs, ys = [9_000, 20_000, 21_000, 25_000, 30_000, 31_000], [500.0, 400.0, 100.0, 200.0, 300.0, 900.0]
    assert bin_mean(xs, ys, 30_000, width) == 200.0  # 21k, 25k, 30k: not 20k (the bin before), not 31k
    assert bin_mean(xs, ys, 50_000, width) is None
    table = format_table("dmc_cartpole_swingup", 30_000, [300.0, 250.0, 280.0], 55.3,
                         reference_at("dmc_proprio", "cartpole_swingup", 30_000), [200.0, 290.0, 230.0], width)
    row = next(line for line in table.splitlines() if "training episodes in (20,000, 30,000]" in line)
    assert "| 200, 290, 230 | 230.0 |" in row and "| 0.88x |" in row
    missing = format_table("dmc_cartpole_swingup", 30_000, [300.0, 250.0, 280.0], 55.3,
                           reference_at("dmc_proprio", "cartpole_swingup", 30_000), [200.0, None, 230.0], width)
    assert "(the score files' measure)" not in missing
    assert "no training episodes in (20,000, 30,000] in 1 of 3 seeds" in missing


def fake_seed_runs(monkeypatch, fail_seed=None):
    """seed_command replaced by a small process writing the scores.json a run would (return = 10 x seed),
    recording the cores and threads it was given and how many fake runs overlapped."""
    import benchmarks.learning as learning

    def seed_command(preset, seed, run_dir, overrides):
        script = (f"import json, os, sys, time, pathlib; d = pathlib.Path({str(run_dir)!r}); "
                  "live = d.parent / 'live'; live.mkdir(exist_ok=True); me = live / str(os.getpid()); me.touch(); "
                  "time.sleep(1.5); n = len(list(live.iterdir())); me.unlink(); "
                  "(d / 'seen.json').write_text(json.dumps({'threads': os.environ.get('OMP_NUM_THREADS'), "
                  "'cores': sorted(os.sched_getaffinity(0)), 'overlap': n})); "
                  f"(d / 'scores.json').write_text(json.dumps([{{'split': 'eval', 'xs': [0, 100], "
                  f"'ys': [1.0, {10.0 * seed}]}}, {{'split': 'train', 'xs': [50, 100], 'ys': [2.0, {seed}]}}])); "
                  f"sys.exit({1 if seed == fail_seed else 0})")
        return [sys.executable, "-c", script]

    monkeypatch.setattr(learning, "seed_command", seed_command)
    return learning


@pytest.mark.parametrize("parallel", [1, 2, 3])
def test_learning_benchmark_runs_seeds_one_or_several_at_a_time(monkeypatch, tmp_path, parallel):
    """As the suite runs them: each seed on its own cores with as many threads, or (more seeds at once
    than cores) the cores' share of threads."""
    import json
    import os

    from benchmarks.jobs import core_slots

    learning = fake_seed_runs(monkeypatch)
    curves = learning.train_seeds("learn_cpu", [0, 1, 2], tmp_path, [], parallel)
    assert list(curves) == [0, 1, 2] and [c["ys"][-1] for c in curves.values()] == [0.0, 10.0, 20.0]
    assert [c["train"]["ys"] for c in curves.values()] == [[2.0, 0], [2.0, 1], [2.0, 2]]
    seen = [json.loads((tmp_path / f"seed{s}" / "seen.json").read_text()) for s in (0, 1, 2)]
    assert max(s["overlap"] for s in seen) == parallel
    cores = sorted(os.sched_getaffinity(0))
    slots = core_slots(parallel)
    if slots:
        assert all(s["cores"] in slots and s["threads"] == str(len(s["cores"])) for s in seen)
    else:
        assert all(s["cores"] == cores and s["threads"] == str(max(1, len(cores) // parallel)) for s in seen)


def test_learning_benchmark_stops_on_a_failed_seed(monkeypatch, tmp_path):
    learning = fake_seed_runs(monkeypatch, fail_seed=1)
    with pytest.raises(SystemExit, match="seed 1 failed"):
        learning.train_seeds("learn_cpu", [0, 1, 2], tmp_path, [], 3)


def test_learning_benchmark_rejects_a_parallel_count_below_one():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.learning", "--parallel", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--parallel must be >= 1 (got 0)" in proc.stderr


@pytest.mark.slow
def test_cpu_learner_bench_prints_eager_and_regional_cold_and_warm(tmp_path):
    # the official learner needs its own JAX venv (scripts/official_venv.sh); a stand-in python that
    # answers as benchmarks/official_learner.py does checks that its row lands beside ours
    official = tmp_path / "official-python"
    official.write_text('#!/bin/sh\necho \'{"first_s": 21.5, "ms": 500.0, "threads": 2, "params": 7, "jax": "x"}\'\n')
    official.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cpu_learner", "--shapes", "tiny:proprio:4",
                           "--updates", "1", "--official", str(official)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-5].startswith("| shape | eager, MKL's default kernels ms/update | eager ms/update | regional ms/update")
    assert lines[-1].startswith("tiny:proprio:4: 124,102 trained parameters here, 7 in the official")
    cells = [c.strip() for c in lines[-3].split("|")[1:-1]]
    assert cells[0] == "tiny T4 proprio" and len(cells) == 11
    cold, warm = float(cells[6]), float(cells[7])
    assert cold > warm  # the warm run found the cold run's compiled regions on disk
    regional = [float(ms) for ms in cells[3].split(",")]
    assert abs(float(cells[4].rstrip("x")) - float(cells[1]) / max(regional)) < 0.05  # of rounded figures
    assert cells[8] == "500" and cells[9] == f"{max(regional) / 500:.2f}x" and cells[10] == "21.5"
    from patches import mkl_amd
    # on an AMD CPU with AVX-512 the first column ran with MKL's own kernel choice, the others with the fix
    assert (mkl_amd.STATUS or "MKL as shipped") in lines[-7]
    assert ("eager with MKL's default kernels" in proc.stdout) == (mkl_amd.STATUS == mkl_amd.ACTIVE)


@pytest.mark.parametrize("size", ["tiny", "s"])
def test_the_official_learner_is_built_at_our_presets_shapes(size):
    """benchmarks/official_learner.py (run in the official's venv) sets the official config keys from
    the dimensions cpu_learner reads from our preset; its default is tiny.yaml's."""
    from benchmarks.cpu_learner import preset_dims
    from benchmarks.official_learner import TINY, shape_overrides
    from tests.helpers import preset as composed_preset

    preset = composed_preset(size)
    if size == "tiny":
        assert preset_dims("tiny") == TINY
    keys = shape_overrides(preset_dims(size), batch=16, length=64, seed=0, logdir="/tmp/x")
    rssm = {key.split(".")[-1]: value for key, value in keys.items() if key.startswith("agent.dyn.rssm.")}
    assert rssm == {"deter": preset.deter, "hidden": preset.hidden, "stoch": preset.stoch,
                    "classes": preset.classes, "blocks": preset.blocks}
    layers = {"enc.simple": preset.mlp_layers, "dec.simple": preset.mlp_layers, "rewhead": preset.head_layers,
              "conhead": preset.head_layers, "policy": preset.policy_layers, "value": preset.policy_layers}
    for part, depth in layers.items():
        assert keys[f"agent.{part}.units"] == preset.mlp_units and keys[f"agent.{part}.layers"] == depth
    assert keys["jax.compute_dtype"] == "float32" and keys["replay_context"] == 1
    assert not any(key.endswith((".depth", ".mults")) for key in keys)  # proprio: the official CNN defaults unused
    pixels = shape_overrides(preset_dims(size, "pixels"), batch=16, length=64, seed=0, logdir="/tmp/x")
    for part in ("enc.simple", "dec.simple"):  # the image encoder and decoder at our preset's widths
        assert pixels[f"agent.{part}.depth"] == preset.cnn_depth and pixels[f"agent.{part}.mults"] == list(preset.cnn_mults)


def test_the_official_learner_benchmarks_name_a_missing_official_setup(tmp_path):
    """Without scripts/official_venv.sh's venv or checkout, both say what is missing and where."""
    missing = tmp_path / "nothing"
    for command, flag in (([sys.executable, "-m", "benchmarks.cpu_learner", "--official", str(missing)], "--official"),
                          ([sys.executable, "benchmarks/official_learner.py", "--src", str(missing)], "--src")):
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"{flag} {missing}: no " in proc.stderr and "scripts/official_venv.sh" in proc.stderr


def test_suite_normalises_against_random_and_the_reference_and_names_its_sources():
    from benchmarks.suite import TASKS, reference, summarise
    from benchmarks.suite_table import format_table

    assert reference(TASKS["walker_walk"], 30_000)["value"] == pytest.approx(125.2, abs=0.1)  # official median
    assert reference(TASKS["cheetah_run"], 30_000)["value"] == pytest.approx(191.5, abs=0.1)
    assert reference(TASKS["Acrobot-v1"], 12_000) == {"value": -100.0, "source": TASKS["Acrobot-v1"].source}
    row = summarise(TASKS["Acrobot-v1"], 12_000, [-300.0, -100.0, -500.0], [-400.0, -450.0, -200.0], random=-500.0,
                    minutes=30.0)
    assert (row["median"], row["normalised"], row["normalised_min"], row["normalised_max"]) == (-300.0, 0.5, 0.0, 1.0)
    assert (row["sampled_median"], row["normalised_sampled"]) == (-400.0, 0.25)
    table = format_table([row], seeds=3, eval_episodes=10, hours=0.5)
    assert ("| Acrobot-v1 | 12,000 | -500.0 | -300.0 (-500.0 to -100.0) | -100.0 | **0.50** (0.00 to 1.00) "
            "| -400.0 (0.25) | 30 |") in table
    assert "Gymnasium's reward_threshold" in table
    assert "median normalised score over 1 tasks: 0.50 (sampled actions: 0.25); wall time 0.50 h\n" in table
    resumed = format_table([row], seeds=3, eval_episodes=10, hours=2.5, invocations=2)
    assert "wall time 2.50 h over 2 invocations (stopped and resumed)" in resumed


def test_a_resumed_suite_adds_its_wall_time_to_the_stopped_ones(tmp_path):
    from benchmarks.suite_table import add_wall_time

    assert add_wall_time(tmp_path, 3600.0) == {"seconds": 3600.0, "invocations": 1}
    assert add_wall_time(tmp_path, 1800.0) == {"seconds": 5400.0, "invocations": 2}
    assert json.loads((tmp_path / "wall_time.json").read_text())["seconds"] == 5400.0


def test_a_stopped_suite_still_records_its_wall_time(monkeypatch, tmp_path):
    import benchmarks.suite as suite

    def stopped(*args):
        raise KeyboardInterrupt  # Ctrl-C, or SIGTERM (stop_on_sigterm) as SystemExit, mid-suite

    monkeypatch.setattr(suite, "train_and_evaluate", stopped)
    with pytest.raises(KeyboardInterrupt):
        suite.main(["--tasks", "CartPole-v1", "--seeds", "0", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "wall_time.json").read_text())["invocations"] == 1


@pytest.mark.slow
def test_suite_trains_each_task_evaluates_the_final_checkpoint_and_prints_one_table(tmp_path):
    from benchmarks.suite_table import num

    command = [sys.executable, "-m", "benchmarks.suite", "--tasks", "CartPole-v1,Pendulum-v1", "--seeds", "0",
               "--parallel", "2", "--steps", "300", "--eval-episodes", "2", "--random-episodes", "2",
               "--out", str(tmp_path), "replay.batch_size=2", "replay.batch_length=8", "learner.train_ratio=8",
               "learner.prefill_frames=100", "eval.every=300", "logger=none"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "suite.json").read_text())
    rows = {r["task"]: r for r in result["rows"]}
    assert set(rows) == {"CartPole-v1", "Pendulum-v1"}
    for name, row in rows.items():
        final, sampled = (json.loads((tmp_path / name / "seed0" / out / "eval.json").read_text())
                          for out in ("final_eval", "final_eval_sampled"))
        assert len(final["returns"]) == 2 and row["finals"] == [final["mean"]]
        assert len(sampled["returns"]) == 2 and row["sampled_finals"] == [sampled["mean"]]
        assert row["normalised"] == pytest.approx((row["median"] - row["random"])
                                                  / (row["reference"]["value"] - row["random"]))
        assert row["normalised_sampled"] == pytest.approx((row["sampled_median"] - row["random"])
                                                          / (row["reference"]["value"] - row["random"]))
        assert f"| {name} | 300 | {num(row['random'])} | {num(row['median'])}" in proc.stdout
    evaluations = (tmp_path / "Pendulum-v1" / "seed0" / "stdout.log").read_text()
    assert "mode actions" in evaluations and "sampled actions" in evaluations  # what dreamer.evaluate said
    assert 0 < rows["CartPole-v1"]["random"] < 100 and rows["Pendulum-v1"]["random"] < -100
    assert (tmp_path / "suite.png").read_bytes()[:4] == b"\x89PNG"
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout.count("not trained again") == 2  # picks up where it stopped
    resumed = json.loads((tmp_path / "suite.json").read_text())
    assert resumed["invocations"] == 2 and resumed["hours"] > result["hours"]  # both invocations' time
    assert "over 2 invocations" in again.stdout


def test_suite_rejects_an_unknown_task():
    from benchmarks.suite import main

    with pytest.raises(SystemExit):
        main(["--tasks", "CartPole-v1,Pong"])


@pytest.mark.slow
def test_diagnose_measures_a_checkpoints_world_model_and_critic_on_fresh_episodes(tmp_path):
    from tests.conftest import run_train

    run = tmp_path / "run"
    proc = run_train("experiment=learn_cartpole", "collector.total_frames=300", "learner.prefill_frames=100",
                     "learner.train_ratio=8",
                     "replay.batch_size=2", "replay.batch_length=8", "eval.every=0", "logger=none",
                     "learner.compile=false", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = subprocess.run([sys.executable, "-m", "benchmarks.diagnose", str(run), "--episodes", "2"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    row = next(line for line in out.stdout.splitlines() if "gym_CartPole-v1" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "300" and float(cells[3]) > 0  # env steps, the episodes' mean return
    reward_mae, reward_mad = (float(x.strip("()")) for x in cells[4].split())
    assert reward_mae >= 0 and reward_mad == 0.0  # CartPole pays 1 every step: nothing to deviate
    assert 0 <= float(cells[5].split("/")[0]) <= 1  # the continuation head's mean where episodes go on
    assert float(cells[7]) > 0  # a discrete policy's entropy (nats)
    missing = subprocess.run([sys.executable, "-m", "benchmarks.diagnose", str(tmp_path / "nothing")], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no checkpoints/" in missing.stderr


def test_replay_bench_measures_memory_and_disk_in_one_table(tmp_path):
    out = subprocess.run([sys.executable, "-m", "benchmarks.replay", "--records", "600", "--samples", "2",
                          "--dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 600 |")]
    assert [r.split("|")[2].strip() for r in rows] == ["memory", "disk"]
    memory, disk = ([c.strip() for c in r.strip("|").split("|")] for r in rows)
    assert int(disk[5].replace(",", "")) < 10_000 < int(memory[5].replace(",", ""))  # checkpoint bytes
    assert all(re.fullmatch(r"-?[\d,]+ \+ -?[\d,]+", row[6]) for row in (memory, disk))  # RSS: anonymous + file
    assert list(tmp_path.iterdir()) == []  # its replays removed


def test_suite_runs_seed_by_seed_with_the_largest_budgets_first():
    """The last seed ends with its shortest runs, filling both cores to the end."""
    from benchmarks.suite import TASKS, job_order

    tasks = [TASKS[t] for t in ("CartPole-v1", "Acrobot-v1", "MiniGrid-Empty-5x5-v0", "cheetah_run", "walker_walk")]
    order = [(seed, task.name) for seed, task in job_order(tasks, [0, 1], None)]
    per_seed = ["MiniGrid-Empty-5x5-v0", "cheetah_run", "walker_walk", "Acrobot-v1", "CartPole-v1"]
    assert order == [(0, name) for name in per_seed] + [(1, name) for name in per_seed]
    same_budget = [task.name for _, task in job_order(tasks, [0], 500)]  # --steps: the list's order
    assert same_budget == [task.name for task in tasks]


def test_suite_resumes_a_run_that_has_checkpoints_but_no_final_evaluation(tmp_path):
    from benchmarks.suite import TASKS, run_commands

    fresh = run_commands(TASKS["CartPole-v1"], 0, 100, tmp_path, [], 2)[0]
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step_000000000064.pt").write_bytes(b"")
    resumed = run_commands(TASKS["CartPole-v1"], 0, 100, tmp_path, [], 2)[0]
    assert not any(a.startswith("resume=") for a in fresh)
    assert resumed == fresh + [f"resume={tmp_path / 'checkpoints'}"]


def test_suite_gives_a_run_evaluated_only_with_the_mode_its_sampled_evaluation(tmp_path):
    """A run dir from a suite before the sampled column: only the missing evaluation runs, no training."""
    from benchmarks.suite import TASKS, run_commands

    commands = run_commands(TASKS["CartPole-v1"], 0, 100, tmp_path, [], 2)
    assert [c[1] for c in commands] == ["train.py", "-m", "-m"]
    assert [c[-2:] for c in commands[1:]] == [["eval.sample_actions=false", f"out={tmp_path / 'final_eval'}"],
                                              ["eval.sample_actions=true", f"out={tmp_path / 'final_eval_sampled'}"]]
    for out in ("final_eval", "final_eval_sampled"):
        (tmp_path / out).mkdir()
        (tmp_path / out / "eval.json").write_text("{}")
        left = run_commands(TASKS["CartPole-v1"], 0, 100, tmp_path, [], 2)
        assert left == ([commands[2]] if out == "final_eval" else [])


def test_pinned_jobs_run_each_on_its_own_cores_and_hand_them_on(tmp_path, capsys):
    import os

    from benchmarks.jobs import Job, core_slots, run_jobs

    cores = sorted(os.sched_getaffinity(0))
    assert core_slots(len(cores) + 1) is None  # more runs than cores: not pinned
    if len(cores) < 2:
        pytest.skip("one core: nothing to split")
    show = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    jobs = [Job("CartPole-v1", seed, [show, show], tmp_path / f"seed{seed}") for seed in range(3)]
    run_jobs(jobs, 2, pin=True)
    assert capsys.readouterr().out.count(f"(on cores {','.join(map(str, jobs[0].cpus))})") >= 2
    seen = [[json.loads(line) for line in (tmp_path / f"seed{seed}" / "stdout.log").read_text().splitlines()]
            for seed in range(3)]
    assert all(train == evaluate for train, evaluate in seen)  # a job's commands keep its cores
    first, second, third = (cpus for cpus, _ in seen)
    assert not set(first) & set(second) and sorted(first + second) == cores
    assert third in (first, second)  # the third job runs on the cores of the one that finished


def test_a_pinned_job_gets_as_many_threads_as_its_own_cores_an_unpinned_one_its_share(tmp_path):
    """Intra-op threads follow the job's cores, not the machine's CPU count: here the suite may use
    one core of a larger machine (as in a cpuset container), so its one job gets one thread. Jobs
    that are not pinned share the cores out."""
    import os

    from benchmarks.jobs import Job, run_jobs

    show = [sys.executable, "-c", "import os; print(len(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'])"]
    cores = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, [min(cores)])  # the jobs inherit the narrower set
        job = Job("CartPole-v1", 0, [show], tmp_path)
        run_jobs([job], 1, pin=True)
    finally:
        os.sched_setaffinity(0, cores)
    assert (tmp_path / "stdout.log").read_text().split() == ["1", "1"]
    unpinned = [Job("CartPole-v1", seed, [show], tmp_path / f"unpinned{seed}") for seed in (1, 2)]
    run_jobs(unpinned, 2)  # not pinned: each run gets its share of the cores as threads
    share = str(max(1, len(cores) // 2))
    assert all((job.run_dir / "stdout.log").read_text().split() == [str(len(cores)), share] for job in unpinned)


def test_a_terminated_suite_stops_its_running_jobs(tmp_path):
    """SIGTERM to the suite reaches its jobs (each checkpoints and stops): none is left training."""
    import signal
    import time

    import psutil

    script = ("import sys; from pathlib import Path\n"
              "from benchmarks.jobs import Job, run_jobs, stop_on_sigterm\n"
              "stop_on_sigterm()\n"
              f"job = Job('CartPole-v1', 0, [[sys.executable, '-c', 'import time; time.sleep(600)']], "
              f"Path({str(tmp_path)!r}))\n"
              "run_jobs([job], 1)\n")
    suite = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not psutil.Process(suite.pid).children() and time.monotonic() < deadline:
        time.sleep(0.1)
    children = psutil.Process(suite.pid).children()
    assert len(children) == 1
    suite.send_signal(signal.SIGTERM)
    assert suite.wait(timeout=120) == 128 + signal.SIGTERM
    assert not children[0].is_running() or children[0].status() == psutil.STATUS_ZOMBIE


def test_suite_run_minutes_add_up_the_processes_of_a_resumed_run(tmp_path):
    from benchmarks.suite_table import run_minutes

    rows = [{"step": 1, "time/elapsed_s": 60.0}, {"step": 2, "time/elapsed_s": 600.0},  # stopped at 10 min
            {"step": 2, "eval/return": 1.0},
            {"step": 3, "time/elapsed_s": 30.0}, {"step": 4, "time/elapsed_s": 300.0}]  # resumed: 5 min more
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_minutes(tmp_path) == 15.0
