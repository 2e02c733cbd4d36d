"""Outputs of a trained model for inputs of your own, one a line: f(x), or Pi(f(x)) as evaluate.py chooses.

    python predict.py runs/standard/model.pt < inputs.txt > outputs.txt
    python predict.py runs/composed/model.pt --input inputs.txt              # Pi(f(x)): a composed model's own Pi
    python predict.py runs/composed/model.pt --denoiser none < inputs.txt    # its base predictor f alone
    python predict.py runs/standard/model.pt --denoiser runs/denoiser/model.pt < inputs.txt   # a test-time Pi
    echo 'read var_0 from stdin ; print var_0' | python predict.py runs/standard/model.pt

A checkpoint holds its tokenizer, so no data folder is needed. Decoding is greedy, in batches of similar length, as
evaluate.py decodes; the outputs come in the inputs' order. From Python, in five lines:

    import common
    checkpoint = common.load_checkpoint("runs/standard/model.pt")
    model = common.model_from_checkpoint(checkpoint)
    tokenizer = common.load_tokenizer(checkpoint["spm"])
    print(common.translate(model, tokenizer, ["read var_0 from stdin ; print var_0"], batch_size=1)[0])
"""
import os
import sys

import common
import spoc


def main(argv=None):
    parser = common.ArgumentParser(prog="predict.py", description=__doc__)
    parser.add_argument("model", help="a predictor checkpoint (runs/<name>/model.pt)")
    parser.add_argument("--input", help="a file of inputs, one a line (default: standard input)")
    parser.add_argument("--denoiser", help="apply this denoiser: Pi(f(x)) (a composed model applies its own unless "
                        "given another, or none)")
    parser.add_argument("--batch-size", type=int, default=64, help="inputs decoded at once")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    common.run_main("predict.py", predict, parser.parse_args(argv))


def predict(args):
    spm = common.load_checkpoint(args.model, needs=("spm",))["spm"]
    model, checkpoint = common.load_model(args.model, spm, args.model, "predictor")
    denoiser, denoiser_checkpoint = common.chosen_denoiser(checkpoint, args.denoiser, spm, args.model)
    device = common.pick_device(args.device)
    inputs = common.read_lines(args.input) if args.input else sys.stdin.read().splitlines()
    tokenizer = common.load_tokenizer(spm)
    outputs = common.translate(model.to(device), tokenizer, inputs, args.batch_size) if inputs else []
    if denoiser:
        outputs = common.denoise(denoiser.to(device), tokenizer, outputs, args.batch_size,
                                 spoc.error_detector(denoiser_checkpoint))
    try:
        sys.stdout.writelines(output + "\n" for output in outputs)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader took what it wanted (| head): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
