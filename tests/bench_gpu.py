"""The training side of the GPU path, measured by one command (10 minutes of a lent GPU at the paper preset):

    python tests/bench_gpu.py                                  # a lent GPU: --preset paper, bf16 where it has it
    python tests/bench_gpu.py --stages data,steps,compile      # the step figures alone
    python tests/bench_gpu.py --preset smoke --device cpu      # a dry run on 2 cores (tests/test_bench_gpu.py: --seeds 0)
    python tests/bench_gpu.py --preset cpu --device cpu --stages data,steps   # the step figures on the CPU

Its stages, each timed, in a scratch folder (--work; default a new temporary one), cut when --budget runs out:
  data      make_sanstype.py (--preset smoke: 60 labeled pairs, 200 unlabeled programs, 20 per evaluation split)
  steps     a fresh denoiser of the preset's size trains in this process on epochs of fresh corruptions, made as
            harness.train makes them (harness.epochs_ahead): every step of the second epoch timed, the slowest against
            the median (the first epoch meets every shape first); steps while harness.train's worker process
            (epochs_ahead) makes an epoch, and while a thread does, against the same steps alone
  table2    the README's Table 2 block as written (TABLE2_BLOCK, P set to this preset and device), phase by phase:
            the denoiser Pi beside the baselines of seeds 0-2 (Pi's first epoch and a later one, from its last.pt),
            then each seed's standard run, its composed run and control side by side, every evaluation, the table;
            each run's epochs, best epoch, seconds, and the most epochs a better one took (what patience outlasts)
  composed  tests/bench_composed.py on the block's Pi and seed 0's standard run (if the block did not get that far,
            a standard run of one epoch): a composed step against a standard one, greedy decoding of the test
            split, a composed epoch with its validation
  compile   the steps of stage steps under torch.compile(dynamic=True) against eager ones, and the seconds the
            compilation took (last: it cannot be cut, so it runs only with 90 s of the budget left)
  fidelity  the suspects for standard's gap to the paper, side by side (python tests/bench_gpu.py --stages
            data,fidelity; --released DIR: the authors' train and val): Pi of each --pi-seeds with our data and the
            authors' (train_denoiser.py --pi-data), in --pi-precision; standard fine-tuning (seed 0) from each, in bf16
            and fp32, and the baseline in both beside them; each judged on test and ood with and without a
            test-time Pi (a standard run: the Pi it started from; the baseline: each Pi); one table, with paired
            differences over Pi's seeds
Last line, name=value pairs: device, slowest_step_vs_median, step_while_next_epoch_vs_alone,
step_while_next_epoch_in_thread_vs_alone, compiled_step_vs_eager, compile_s, pi_first_epoch_s, pi_epoch_s, pi_s,
composed_step_vs_standard, sampling_vs_standard, composed_epoch_s, greedy_test_s, table2_block_s, fidelity_s (each
where its stage ran; the block's and fidelity's where all of it finished within the budget).
"""
import argparse
import concurrent.futures
import itertools
import json
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import common  # noqa: E402
import harness  # noqa: E402
import train_denoiser  # noqa: E402

# The README's Table 2 block for one GPU (tests/test_docs.py checks that the README shows exactly this): its
# definitions, then its two phases, separated by blank lines; the bench makes the data itself (stage data) and sets P.
TABLE2_BLOCK = """\
P="--preset paper --precision auto"
run() { "$@" || { echo "failed (exit $?): $*" >&2; return 1; }; }  # a failed run says so, and the block stops
judged() { run nice python evaluate.py $1/model.pt && run nice python evaluate.py $1/model.pt --denoiser $2; }
waitall() { local pid ok=0; for pid in $pids; do wait $pid || ok=1; done; pids=; return $ok; }  # each job in $pids

python make_sanstype.py
run python train_denoiser.py $P & pids=$!; for s in 0 1 2; do run python finetune.py --method baseline $P --seed $s --out runs/baseline_$s & pids+=" $!"; done; waitall

for s in 0 1 2; do (pids=; run python finetune.py --method standard $P --seed $s --out runs/standard_$s || exit
  (run python finetune.py --method composed $P --seed $s --init runs/standard_$s/model.pt --out runs/composed_$s && judged runs/composed_$s none) & pids+=" $!"
  (run python finetune.py --method composed $P --seed $s --init runs/standard_$s/model.pt --composed-weight 0 --out runs/control_$s && judged runs/control_$s none) & pids+=" $!"
  judged runs/baseline_$s runs/denoiser/model.pt && judged runs/standard_$s runs/denoiser/model.pt; judging=$?; waitall && exit $judging) & pids+=" $!"; done; waitall
python evaluate.py --table runs/*/
"""
SMOKE_DATA = ["--labeled", "60", "--unlabeled", "200", "--num-eval", "20"]


def wait(device):
    """The device's queued work done: a GPU runs behind the host, and a timing must include its work."""
    if device.type == "cuda":
        torch.cuda.synchronize()


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.time() + seconds

    def left(self) -> float:
        return self.end - time.time()


def run(command: list[str] | str, work: str, log: str, deadline: Deadline) -> float | None:
    """Wall seconds of a command (a list: a program; a string: a bash script) run in `work`, its output into `log`;
    None if the deadline came first (it is then stopped, with every process it started)."""
    start = time.time()
    with open(log, "w") as out:  # one thread a process unless told otherwise: the block runs many side by side
        process = subprocess.Popen(["bash", "-c", command] if isinstance(command, str) else command, cwd=work,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={"OMP_NUM_THREADS": "1", **os.environ})
        try:
            process.wait(timeout=max(deadline.left(), 1))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return None
    if process.returncode:
        raise SystemExit(f"bench_gpu.py: {command if isinstance(command, str) else shlex.join(command)} failed "
                         f"(exit {process.returncode}); its output: {log}")
    return time.time() - start


class StepBench:
    """Stages steps and compile: a fresh denoiser of the preset's size trains in this process on epochs of fresh
    corruptions, made as harness.train makes them (see the docstring)."""

    def __init__(self, data: str, args):
        self.flags = train_denoiser.parse_args(["--data", data, "--preset", args.preset, "--precision", "auto", "--out",
                                                os.path.join(args.work, "steps")] + ["--device", args.device] * bool(
                                                    args.device))
        self.device, self.max_steps = harness.pick_device(self.flags.device), args.max_steps
        self.tokenizer = common.load_tokenizer(harness.read_data_folder(data)["spm"])
        self.programs = common.read_lines(os.path.join(data, "unlabeled.tgt")) + \
            common.read_lines(os.path.join(data, "train.tgt"))
        self.clean_ids = self.tokenizer.encode(self.programs)
        torch.manual_seed(0)
        self.model = common.Transformer(harness.transformer_config(self.flags, self.tokenizer.get_piece_size()))
        self.model.to(self.device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98),
                                           fused=self.device.type == "cuda")

    def make_epoch(self, epoch: int) -> list[tuple]:  # as harness.train's batches_of
        pairs = train_denoiser.corrupted_pairs(self.programs, self.clean_ids, self.tokenizer, self.flags, epoch)
        return common.batches(pairs, self.flags.batch_size, random.Random(epoch), 8 if self.device.type == "cuda" else 1)

    def steps(self, net, epoch_batches) -> list[float]:
        """Each step's seconds, its device work included."""
        times = []
        for batch in epoch_batches:
            start = time.perf_counter()
            src, tgt_in, tgt_out = (t.to(self.device, non_blocking=True) for t in batch)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.flags.precision == "bf16"):
                loss = common.sequence_loss(net(src, tgt_in), tgt_out)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            wait(self.device)
            times.append(time.perf_counter() - start)
        return times

    def figures(self) -> dict:
        """Stage steps."""
        start = time.perf_counter()
        self.make_epoch(0)
        making_s = time.perf_counter() - start
        # As harness.train: one worker for the run makes epoch 1, then each next epoch while the one before it trains.
        upcoming = harness.epochs_ahead(self.make_epoch, range(1, 5), pin=self.device.type == "cuda")
        first = next(upcoming)
        first_times = self.steps(self.model, first[:self.max_steps])  # shapes met first; the worker makes epoch 2
        self.second = next(upcoming)
        second_times = self.steps(self.model, self.second[:self.max_steps])  # the worker makes epoch 3
        median = statistics.median(second_times)
        print(f"steps: {self.flags.preset} preset, {self.flags.precision}, batch {self.flags.batch_size}; epoch 1 "
              f"(shapes met first): {len(first_times)} steps, median {1000 * statistics.median(first_times):.1f} ms, "
              f"slowest {1000 * max(first_times):.1f} ms; epoch 2: median {1000 * median:.1f} ms, slowest "
              f"{1000 * max(second_times):.1f} ms; making an epoch in this process: {making_s:.2f} s", flush=True)

        # Epoch 2's first steps, those that take half the time making an epoch takes in this process, run again: while
        # the worker makes epoch 4 (it starts once epoch 3 is taken), alone, while a thread makes an epoch, alone
        # again. Each a repeat of the same batches: a batch's first pass is slower (an H100: 24.7 against 20.8 ms).
        self.during = max(5, sum(1 for end in itertools.accumulate(second_times) if end < making_s / 2))
        repeat = self.second[:self.during]
        next(upcoming)
        with_worker = statistics.median(self.steps(self.model, repeat))
        next(upcoming)  # (the worker is done)
        alone_before = self.steps(self.model, repeat)
        making = concurrent.futures.ThreadPoolExecutor(1).submit(self.make_epoch, 5)
        with_thread = statistics.median(self.steps(self.model, repeat))
        making.result()
        self.alone = statistics.median(alone_before + self.steps(self.model, repeat))
        print(f"epoch 2's first {self.during} steps again: alone {1000 * self.alone:.1f} ms (median, before and "
              f"after the thread); while the worker makes an epoch {1000 * with_worker:.1f} ms; while a thread does "
              f"{1000 * with_thread:.1f} ms", flush=True)
        return {"slowest_step_vs_median": max(second_times) / median, "step_while_next_epoch_vs_alone":
                with_worker / self.alone, "step_while_next_epoch_in_thread_vs_alone": with_thread / self.alone}

    def compile_figures(self) -> dict:
        """Stage compile: the same steps as stage steps timed alone, under torch.compile(dynamic=True)."""
        compiled = torch.compile(self.model, dynamic=True)
        start = time.perf_counter()
        self.steps(compiled, self.second[:1])
        compile_s = time.perf_counter() - start
        self.steps(compiled, self.second[:self.during])  # shapes of another kind may compile again
        compiled_median = statistics.median(self.steps(compiled, self.second[:self.during]))
        print(f"torch.compile(dynamic=True): the first step {compile_s:.1f} s, then median "
              f"{1000 * compiled_median:.1f} ms ({compiled_median / self.alone:.2f}x eager)", flush=True)
        return {"compiled_step_vs_eager": compiled_median / self.alone, "compile_s": compile_s}


def table2(args, deadline: Deadline) -> dict:
    """Stage table2: the README's block, phase by phase, until the deadline; what each run did, from its last.pt."""
    P = f"--preset {args.preset} --precision auto" + f" --device {args.device}" * bool(args.device)
    python = f"{shlex.quote(sys.executable)} {shlex.quote(ROOT)}/"
    definitions, *phases = TABLE2_BLOCK.replace("python make_sanstype.py\n", "").replace("python ", python).split(
        "\n\n")
    definitions = definitions.replace('P="--preset paper --precision auto"', f'P="{P}"')
    phases = [phase.replace("for s in 0 1 2;", f"for s in {args.seeds};") for phase in phases]
    figures, total = {}, 0.0
    for (name, log), phase in zip((("denoiser and baselines", "denoiser"), ("seeds: standard, composed, control, "
                                                                             "every evaluation", "seeds")), phases):
        seconds = run(f"set -e\n{definitions}\n{phase}", args.work, os.path.join(args.work, f"table2_{log}.log"),
                      deadline)
        print(f"table2 {name}: " + (f"{seconds:.0f} s" if seconds is not None else "cut by the budget"), flush=True)
        if name.startswith("denoiser"):
            history = run_history(os.path.join(args.work, "runs", "denoiser"))
            if len(history) >= 2:
                figures.update(pi_first_epoch_s=history[0]["seconds"], pi_epoch_s=statistics.median(
                    h["seconds"] for h in history[1:]), pi_s=sum(h["seconds"] for h in history))
        if seconds is None:
            break
        total += seconds
    else:
        figures["table2_block_s"] = total
        log = open(os.path.join(args.work, "table2_seeds.log")).read()
        print(log[log.rindex("\n| runs ") + 1:].strip(), flush=True)  # the table, after every evaluation's lines
    for run_dir in sorted(os.listdir(os.path.join(args.work, "runs"))):
        history = run_history(os.path.join(args.work, "runs", run_dir))
        if history:
            best, best_epoch, wait = float("inf"), 0, 0  # wait: the most epochs a better one took, what patience outlasts
            for h in history:
                if h["val_loss"] < best:
                    best, best_epoch, wait = h["val_loss"], h["epoch"], max(wait, h["epoch"] - best_epoch)
            print(f"  {run_dir}: {len(history)} epochs in {sum(h['seconds'] for h in history):.0f} s, best epoch "
                  f"{best_epoch} (val loss {best:.4f}), longest wait for a better epoch {wait}", flush=True)
    return figures


def run_history(run_dir: str) -> list[dict]:
    last = os.path.join(run_dir, "last.pt")
    return harness.load_checkpoint(last, needs=("state",))["state"]["history"] if os.path.exists(last) else []


def composed_figures(data: str, args, deadline: Deadline) -> dict:
    """Stage composed: tests/bench_composed.py on the block's Pi and seed 0's standard run."""
    denoiser, init = (os.path.join(args.work, "runs", name, "model.pt") for name in ("denoiser", "standard_0"))
    if not os.path.exists(denoiser):
        print("composed: no denoiser (the budget ended the block before it finished)")
        return {}
    device = ["--device", args.device] if args.device else []
    if not os.path.exists(init):
        init = os.path.join(args.work, "standard_1_epoch", "model.pt")
        print("composed: seed 0's standard run did not finish; a standard run of one epoch stands for it", flush=True)
        run([sys.executable, os.path.join(ROOT, "finetune.py"), "--method", "standard", "--preset", args.preset,
             "--data", data, "--denoiser", denoiser, "--epochs", "1", "--out", os.path.dirname(init), *device],
            args.work, os.path.join(args.work, "standard_1_epoch.log"), deadline)
    flags = train_denoiser.parse_args(["--data", data, "--preset", args.preset, "--precision", "auto"] + device)
    log = os.path.join(args.work, "bench_composed.log")
    seconds = run([sys.executable, os.path.join(ROOT, "tests", "bench_composed.py"), "--data", data, "--init", init,
                   "--denoiser", denoiser, "--batch-size", str(flags.batch_size), "--precision", flags.precision,
                   "--estimates", "2", "--denoiser-batches", "1", *device], args.work, log,
                  deadline)
    if seconds is None:
        print("composed: cut by the budget")
        return {}
    summary = open(log).read().strip().splitlines()
    print("composed: " + "\n  ".join(summary[-6:]), flush=True)
    pairs = dict(pair.split("=") for pair in summary[-1].split())
    wanted = ("composed_step_vs_standard", "sampling_vs_standard", "composed_epoch_s", "greedy_test_s")
    return {name: float(value) for key, value in pairs.items() for name in wanted if key in (name, name + "_cuda")}


def run_all(commands: dict[str, str], work: str, deadline: Deadline, at_once: int) -> bool:
    """Run named bash commands in `work`, at most `at_once` at a time, each logged to logs/NAME.log; False if the
    deadline came first (every one still running is then stopped). A failed command stops the bench, naming it."""
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(at_once) as pool:
        seconds = dict(zip(commands, pool.map(lambda item: run(item[1], work, os.path.join(
            work, "logs", f"{item[0]}.log"), deadline), commands.items())))
    return None not in seconds.values()


def fidelity(args, deadline: Deadline) -> dict:
    """Stage fidelity (see the docstring): three phases, each its commands side by side, then one table."""
    P = f"--preset {args.preset}" + f" --device {args.device}" * bool(args.device)
    py = f"{shlex.quote(sys.executable)} {shlex.quote(ROOT)}/"
    seeds, datas, precisions = args.pi_seeds.split(), ("ours", "authors"), ("bf16", "fp32")
    pis = [(d, p) for p in seeds for d in datas]
    phases = {
        "denoisers and baselines": {
            **{f"pi_{d}_{p}": f"{py}train_denoiser.py {P} --precision {args.pi_precision} --pi-data {d} --seed {p} "
               f"--out runs/pi_{d}_{p}" for d, p in pis},
            **{f"baseline_{x}": f"{py}finetune.py --method baseline {P} --precision {x} --out runs/baseline_{x}"
               for x in precisions}},
        "standard from each Pi": {
            f"standard_{d}_{p}_{x}": f"{py}finetune.py --method standard {P} --precision {x} --denoiser "
            f"runs/pi_{d}_{p}/model.pt --out runs/standard_{d}_{p}_{x}" for d, p in pis for x in precisions},
        "every evaluation": {  # a baseline's test-time Pis each in a folder of their own (a hard link to the model)
            **{f"judge_{run}{'_pi' * bool(pi)}": (f"mkdir -p runs/{run} && ln -f runs/{run.split('+')[0]}/model.pt "
                                                 f"runs/{run}/ && " * ("+" in run)) +
               f"nice {py}evaluate.py runs/{run}/model.pt" + f" --denoiser {pi}" * bool(pi)
               for d, p in pis for x in precisions for run, pi in (
                   (f"standard_{d}_{p}_{x}", ""), (f"standard_{d}_{p}_{x}", f"runs/pi_{d}_{p}/model.pt"),
                   (f"baseline_{x}+pi_{d}_{p}", f"runs/pi_{d}_{p}/model.pt"))},
            **{f"judge_baseline_{x}": f"nice {py}evaluate.py runs/baseline_{x}/model.pt" for x in precisions}}}
    total = 0.0
    for name, commands in phases.items():
        start = time.time()
        finished = run_all(commands, args.work, deadline, at_once=len(commands) if name != "every evaluation"
                           else max(2, (os.cpu_count() or 2) // 2))
        print(f"fidelity {name}: " + (f"{time.time() - start:.0f} s" if finished else "cut by the budget"), flush=True)
        if not finished:
            return {}
        total += time.time() - start
    print(fidelity_table(os.path.join(args.work, "runs"), seeds, datas, precisions), flush=True)
    return {"fidelity_s": total}


def fidelity_table(runs: str, seeds: list[str], datas: tuple, precisions: tuple) -> str:
    """Stage fidelity's table: a row per Pi data and precision (each cell: the mean over Pi's seeds, then each seed's
    value), the baselines, and the paired differences of each suspect over Pi's seeds."""
    def evaluation(run, split):  # % correct on a split
        with open(os.path.join(runs, run, f"eval_{split}.json")) as f:
            return 100 * json.load(f)["accuracy"]

    def best_loss(run):
        return min(h["val_loss"] for h in run_history(os.path.join(runs, run)))

    columns = ("Pi val loss", "f val loss", "test", "test + Pi", "ood", "ood + Pi")
    def standard(d, p, x):
        run = f"standard_{d}_{p}_{x}"
        return [best_loss(f"pi_{d}_{p}"), best_loss(run)] + [evaluation(run, split) for split in (
            "test", "test_denoised", "ood", "ood_denoised")]

    def baseline(d, p, x):
        return [None, best_loss(f"baseline_{x}"), evaluation(f"baseline_{x}", "test"),
                evaluation(f"baseline_{x}+pi_{d}_{p}", "test_denoised"), evaluation(f"baseline_{x}", "ood"),
                evaluation(f"baseline_{x}+pi_{d}_{p}", "ood_denoised")]

    def cell(values, column, sign=""):  # losses to 4 places, % to 1
        if values[0] is None:
            return ""
        digits = sign + (".4f" if "loss" in columns[column] else ".1f")
        mean = f"{statistics.mean(values):{digits}}"
        return mean if len(values) == 1 else f"{mean} ({', '.join(f'{v:{digits}}' for v in values)})"

    def line(name, per_seed, sign=""):
        return f"| {name} | " + " | ".join(cell([v[i] for v in per_seed], i, sign) for i in range(len(columns))) + " |"

    lines = [f"| Pi data, fine-tuning precision | {' | '.join(columns)} |", "|" + " --- |" * (len(columns) + 1)]
    lines += [line(f"{method}, {d}, {x}", [row(d, p, x) for p in seeds])
              for method, row in (("standard", standard), ("baseline", baseline)) for d in datas for x in precisions]
    for name, (d1, x1), (d2, x2) in [(f"authors - ours, {x}", ("authors", x), ("ours", x)) for x in precisions] + \
            [(f"fp32 - bf16, {d} Pi", (d, "fp32"), (d, "bf16")) for d in datas]:
        lines.append(line(f"standard: {name}, paired", [[a - b for a, b in zip(standard(d1, p, x1), standard(d2, p, x2))]
                                                        for p in seeds], sign="+"))
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=("paper", "cpu", "smoke"), default="paper")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    parser.add_argument("--stages", default="data,table2,composed", help="which stages, in this order, of data, "
                        "steps, table2, composed, compile (compile needs steps), fidelity")
    parser.add_argument("--budget", type=float, default=590, help="seconds for every stage together (an H200: "
                        "the data and the block ~560 s)")
    parser.add_argument("--reserve", type=float, default=30, help="seconds of the budget stage table2 leaves "
                        "to stage composed")
    parser.add_argument("--seeds", default="0 1 2", help="stage table2: the block's seeds (the dry run's test: 0 "
                        "alone)")
    parser.add_argument("--pi-seeds", default="0 1", help="stage fidelity: Pi's seeds")
    parser.add_argument("--pi-precision", choices=("fp32", "bf16"), default="fp32",
                        help="fidelity: Pi's (the authors trained in fp32)")
    parser.add_argument("--released", metavar="DIR", help="stage data: the authors' train and val from DIR "
                        "(make_sanstype.py --released)")
    parser.add_argument("--max-steps", type=int, default=300, help="steps timed an epoch, at most")
    parser.add_argument("--work", help="the scratch folder (default: a new temporary one)")
    args = parser.parse_args(argv)
    stages = args.stages.split(",")
    if not set(stages) <= {"data", "steps", "table2", "composed", "compile", "fidelity"} or (
            "compile" in stages and "steps" not in stages[:stages.index("compile")]):
        parser.error(f"--stages {args.stages}: of data, steps, table2, composed, compile (after steps), fidelity")
    return args


def main():
    args = parse_args()
    stages = args.stages.split(",")
    deadline = Deadline(args.budget)
    args.work = args.work or tempfile.mkdtemp(prefix="bench_gpu-")
    os.makedirs(args.work, exist_ok=True)
    device = harness.pick_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"bench_gpu: {name}, torch {torch.__version__}, preset {args.preset}, work folder {args.work}", flush=True)
    data = os.path.join(args.work, "data", "sanstype")
    figures = {}
    started = time.time()
    for stage in stages:
        if stage == "data":
            released = ["--released", os.path.abspath(args.released)] if args.released else []
            sizes = SMOKE_DATA if args.preset == "smoke" else []
            if released:  # the released train is taken as it is: no --labeled
                sizes = [flag for pair in zip(sizes[::2], sizes[1::2]) if pair[0] != "--labeled" for flag in pair]
            seconds = run([sys.executable, os.path.join(ROOT, "make_sanstype.py"), *sizes, *released], args.work,
                          os.path.join(args.work, "data.log"), deadline)
            print(f"data: {seconds:.0f} s", flush=True)
        elif stage == "steps":
            bench = StepBench(data, args)
            figures.update(bench.figures())
        elif stage == "table2":  # stage composed, if it follows, keeps --reserve seconds of the budget
            reserve = args.reserve if "composed" in stages[stages.index(stage):] else 0
            figures.update(table2(args, Deadline(deadline.left() - reserve)))
        elif stage == "composed":
            figures.update(composed_figures(data, args, deadline))
        elif stage == "fidelity":
            figures.update(fidelity(args, deadline))
        elif deadline.left() < 90:  # compile: it cannot be cut once started, and may take a minute or more
            print(f"compile: skipped, {deadline.left():.0f} s of the budget left")
        else:
            figures.update(bench.compile_figures())
        print(f"({stage} done at {time.time() - started:.0f} s)", flush=True)
    print(f"device={name.replace(' ', '_')} " + " ".join(f"{key}={value:.2f}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
