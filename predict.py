"""Outputs of a trained model for inputs of your own, one a line: f(x), or Pi(f(x)) as evaluate.py chooses.

    python predict.py runs/standard/model.pt < inputs.txt > outputs.txt
    python predict.py runs/composed/model.pt --input inputs.txt              # Pi(f(x)): a composed model's own Pi
    python predict.py runs/composed/model.pt --denoiser none < inputs.txt    # its base predictor f alone
    python predict.py runs/standard/model.pt --denoiser runs/denoiser/model.pt < inputs.txt   # a test-time Pi
    echo 'an input of your own' | python predict.py runs/standard/model.pt

The checkpoint holds its tokenizer; decoding is greedy, as evaluate.py's. From Python, anywhere:

    import sys; sys.path.insert(0, "/path/to/composed-finetuning")   # this folder
    import predict
    print(predict.predictions("runs/composed/model.pt", ["an input of your own"]))
"""
import os
import sys

import common
import harness


def main(argv=None):
    parser = harness.ArgumentParser(prog="predict.py", description=__doc__)
    parser.add_argument("model", help="a predictor checkpoint (runs/<name>/model.pt)")
    parser.add_argument("--input", help="a file of inputs, one a line (default: standard input); empty in, empty out")
    parser.add_argument("--denoiser", help="Pi(f(x)) with this denoiser, or none (default: a composed model's own)")
    parser.add_argument("--batch-size", type=int, default=64, help="inputs decoded at once")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    args = parser.parse_args(argv)
    harness.check_ranges(parser, args, at_least_1="batch_size")
    harness.run_main("predict.py", predict, args)


def predict(args):
    if args.input and not os.path.isfile(args.input):
        raise common.UsageError(f"missing file: {args.input}")
    try:  # newline="": a file's lines break where standard input's do
        text = open(args.input, encoding="utf-8", newline="").read() if args.input else sys.stdin.read()
    except UnicodeDecodeError:
        raise common.UsageError(f"{args.input or 'standard input'} is not UTF-8 text") from None
    outputs = predictions(args.model, read_inputs(text), args.denoiser, args.batch_size, args.device)
    try:
        sys.stdout.writelines(output + "\n" for output in outputs)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader took what it wanted (| head): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def read_inputs(text: str) -> list[str]:
    r"""One input a line, broken at "\n" or "\r\n" only (an input may hold U+2028, U+0085, a form feed or a lone
    "\r"), so that outputs line up with inputs; a final newline makes no extra input."""
    lines = text.split("\n")
    last = lines.pop()  # what follows the last newline: "", or a last line without one
    return [line.removesuffix("\r") for line in lines] + [last] * bool(last)


def predictions(model_path: str, inputs: list[str], denoiser: str | None = None, batch_size: int = 64,
                device: str | None = None) -> list[str]:
    """The model's output for each input, "" for an empty one: f(x), or Pi(f(x)) where evaluate.py would apply a
    denoiser (a composed model's own Pi unless `denoiser` names another, or "none")."""
    spm = harness.load_checkpoint(model_path, needs=("spm",))["spm"]
    model, checkpoint = harness.load_model(model_path, spm, model_path, "predictor")
    denoiser, denoiser_checkpoint = harness.chosen_denoiser(checkpoint, denoiser, spm, model_path)
    on, tokenizer = harness.pick_device(device), common.load_tokenizer(spm)
    asked = [text for text in inputs if text]
    outputs = common.translate(harness.to_device(model, on), tokenizer, asked, batch_size) if asked else []
    if denoiser and outputs:
        outputs = common.denoise(harness.to_device(denoiser, on), tokenizer, outputs, batch_size,
                                 harness.error_detector(denoiser_checkpoint))
    answers = iter(outputs)
    return [next(answers) if text else "" for text in inputs]


if __name__ == "__main__":
    main()
