"""Composed fine-tuning for font image generation (Section 6.3 and Appendix of the paper).

Predict a 32x32 glyph image from (font, character). A base MLP f trains through a U-Net denoiser Pi, pre-trained on
unlabeled fonts and frozen, so f may stay simple (blurry, gray) while Pi draws the clean strokes.

    python fonts.py render                      # system fonts (+ --font-dir DIR) -> data/fonts/glyphs.npz
    python fonts.py denoiser                    # -> runs/fonts/denoiser.pt (blur; --corruption emboss|contrast)
    python fonts.py train --method direct       # -> runs/fonts/direct.pt
    python fonts.py train --method composed     # -> runs/fonts/composed.pt  (through the frozen denoiser)
    python fonts.py evaluate                    # test MSE table + runs/fonts/samples.png (like Figure 5)
    python fonts.py evaluate runs/fonts/sweep/*.pt --plot labeled.png      # Figure 6: MSE against the sweep

Every training subcommand takes --preset cpu (the default, for 2 cores), paper (the paper's hyperparameters, for a
GPU) or smoke (for the tests); explicit flags override the preset.
"""
import glob
import math
import os
import string
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageFont

import common
import harness
from common import UNet

CHARS = string.digits + string.ascii_uppercase + string.ascii_lowercase   # the 62 classes
SIZE = 32                       # images are SIZE x SIZE, uint8 on disk, [-1, 1] in the models
DEFAULT_DENOISER = "runs/fonts/denoiser.pt"
FONT_DIRS = ["/usr/share/fonts", "/usr/local/share/fonts", "~/.fonts", "~/.local/share/fonts",
             "/Library/Fonts", "/System/Library/Fonts", "~/Library/Fonts", "C:/Windows/Fonts"]
# The paper's test MSEs on the [-1, 1] scale (Section 6.3 and the Appendix's table).
PAPER_TEST_MSE = {("direct", None): 0.193, ("composed", "blur"): 0.171, ("composed", "emboss"): 0.187,
                  ("composed", "contrast"): 0.172, ("composed+dropout", "blur"): 0.165}
# A value per preset for each setting a flag leaves unset. paper: the authors' (Pi: 2 epochs of ~3.5M glyphs);
# cpu: minutes on 2 cores; smoke: the tests. l2: the strengths tried, one chosen on validation.
#                   paper                                     cpu                    smoke
DENOISER_PRESETS = dict(
    width=          (64,                                      32,                    4),
    unet_dropout=   (0.5,                                     0.0,                   0.0),
    steps=          (27000,                                   1200,                  3),
    batch_size=     (256,                                     128,                   8),
    lr=             (2e-4,                                    2e-3,                  1e-3),
)
TRAIN_PRESETS = dict(
    epochs=         (1000,                                    80,                    2),
    patience=       (1000,                                    20,                    2),
    batch_size=     (256,                                     64,                    64),
    lr=             (2e-4,                                    1e-3,                  1e-3),
    l2=             ([0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6], [0, 1e-6, 1e-5, 1e-4], [0, 1e-4]),
)


# === Rendering real font files into 62 x 32 x 32 glyph arrays ===
def find_font_files(dirs):
    """All .ttf/.otf/.ttc files under dirs, sorted, each real file once."""
    return sorted({os.path.realpath(p) for d in dirs
                   for p in glob.glob(os.path.join(os.path.expanduser(d), "**", "*"), recursive=True)
                   if p.lower().endswith((".ttf", ".otf", ".ttc")) and os.path.isfile(p)})


def open_faces(path, size):
    """Every face of a font file (a .ttc collection holds several)."""
    for index in range(64 if path.lower().endswith(".ttc") else 1):
        try:
            yield ImageFont.truetype(path, size, index=index)
        except OSError:
            return


def draw_glyph(font, ch):
    """The glyph on a big canvas, baseline at a fixed height, ink = 255."""
    s = font.size
    img = Image.new("L", (4 * s, 4 * s), 0)
    ImageDraw.Draw(img).text((s, 3 * s), ch, font=font, fill=255, anchor="ls")
    return np.asarray(img)


def render_font(font, chars=CHARS, margin=1):
    """(len(chars), 32, 32) uint8 glyphs, or a string saying why the font is unusable. As in the paper's data
    (Bernhardsson's fonts), one scale per font, to fit SIZE - 2*margin: glyphs keep their sizes and baseline."""
    notdef = draw_glyph(font, "\U0010fffd")   # a private-use code point: no font maps it
    canvases = []
    for ch in chars:
        g = draw_glyph(font, ch)
        if not g.any():
            return "blank glyph among 0-9A-Za-z"
        if notdef.any() and np.array_equal(g, notdef):
            return "missing (.notdef) glyph among 0-9A-Za-z"
        canvases.append(g)
    boxes = [(np.nonzero(g.any(0))[0], np.nonzero(g.any(1))[0]) for g in canvases]
    top, bottom = min(r[0] for _, r in boxes), max(r[-1] for _, r in boxes) + 1
    widest = max(c[-1] + 1 - c[0] for c, _ in boxes)
    scale = (SIZE - 2 * margin) / max(bottom - top, widest)
    out = np.zeros((len(chars), SIZE, SIZE), np.uint8)
    for i, (g, (cols, _)) in enumerate(zip(canvases, boxes)):
        crop = Image.fromarray(g[top:bottom, cols[0]:cols[-1] + 1])
        w, h = (max(1, round(n * scale)) for n in crop.size)
        y, x = (SIZE - h) // 2, (SIZE - w) // 2
        out[i, y:y + h, x:x + w] = np.asarray(crop.resize((w, h), Image.BOX))  # BOX = area average: clean downscaling
    return out


class DuplicateFilter:
    """Keeps a font unless its glyphs are within `threshold` MSE (on [0, 1] pixels) of a kept font's: the same design
    shipped twice (Liberation Sans / Arimo, .ttf and .otf builds) would leak between labeled and unlabeled fonts."""

    def __init__(self, threshold=0.003):
        self.threshold, self.kept, self.sq = threshold, [], []

    def add(self, glyphs):
        """True (and remembered) if glyphs is not a near-duplicate."""
        x = glyphs.reshape(-1).astype(np.float32) / 255
        dots = np.array([k @ x for k in self.kept])     # |a - b|^2 = |a|^2 + |b|^2 - 2 a.b
        if self.kept and ((np.array(self.sq) + x @ x - 2 * dots) / x.size).min() < self.threshold:
            return False
        self.kept.append(x)
        self.sq.append(float(x @ x))
        return True


def cmd_render(args):
    claim_output_file(args.out, args.overwrite, "rendered fonts")
    dirs = ([] if args.no_system_fonts else FONT_DIRS) + args.font_dir
    paths = find_font_files(dirs)
    if not paths:
        raise common.UsageError(f"no .ttf/.otf/.ttc font files found in {dirs}")
    glyphs, names, skipped, n_faces = [], [], Counter(), 0
    dedup, log = DuplicateFilter(args.duplicate_mse), harness.Progress(len(paths), "font files")
    for path in paths:
        try:
            faces = list(open_faces(path, args.render_size))
        except Exception:
            faces = []
        if not faces:
            skipped["unreadable"] += 1
        n_faces += len(faces)
        for font in faces:
            g = render_font(font)
            reason = g if isinstance(g, str) else None if dedup.add(g) else "near-duplicate of a kept font"
            if reason:
                skipped[reason] += 1
            else:
                family, style = font.getname()
                glyphs.append(g)
                names.append(f"{family} {style}".strip() + f" ({os.path.basename(path)})")
        log.step(extra=f"{len(names)} fonts kept")
    print(f"found {len(paths)} font files, {n_faces} faces; kept {len(names)} fonts")
    for why, n in skipped.most_common():
        print(f"  skipped {n:5d}: {why}")
    if not glyphs:
        raise common.UsageError("no usable font: each lacks some of the 62 glyphs 0-9A-Za-z")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    tmp = args.out + ".tmp.npz"
    np.savez_compressed(tmp, glyphs=np.stack(glyphs), names=np.array(names))
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {len(names)} fonts x {len(CHARS)} glyphs x {SIZE}x{SIZE}")


# === The split: 100 labeled fonts x 62 chars -> 2500 train / 100 val / 3600 test; the other fonts are unlabeled ===
def make_split(n_fonts, labeled_fonts=100, n_train=2500, n_val=100, seed=0, verbose=True):
    """Indices, from a fixed seed so that every subcommand sees the same split: dict(labeled=font ids,
    unlabeled=font ids, train/val/test=(font row, char) pairs), where a font row indexes `labeled`."""
    if n_fonts < 2 * labeled_fonts:
        shrunk = max(1, n_fonts // 2)
        if verbose:
            print(f"note: only {n_fonts} usable fonts (the paper: ~56k, 100 of them labeled); "
                  f"using {shrunk} labeled fonts, {n_fonts - shrunk} unlabeled, and scaling the "
                  f"{n_train}/{n_val} train/val examples by {shrunk}/{labeled_fonts}")
        n_train, n_val = (max(1, n * shrunk // labeled_fonts) for n in (n_train, n_val))
        labeled_fonts = shrunk
    n_pairs = labeled_fonts * len(CHARS)
    if n_train + n_val >= n_pairs:
        raise common.UsageError(f"{n_train} train + {n_val} val of {n_pairs} pairs leave none to test: lower --labeled")
    rng = np.random.default_rng(seed)
    fonts, pairs = rng.permutation(n_fonts), rng.permutation(n_pairs)
    pairs = np.stack([pairs // len(CHARS), pairs % len(CHARS)], 1)   # flat indices -> (font row, character)
    return dict(labeled=fonts[:labeled_fonts], unlabeled=fonts[labeled_fonts:], train=pairs[:n_train],
                val=pairs[n_train:n_train + n_val], test=pairs[n_train + n_val:])


def unseen_images_seen(denoiser_split, n_unlabeled, split):
    """How many of the denoiser's clean images are not training images of `split` (those it may see: they are
    unlabeled outputs too, so a Pi trained with --labeled 500 serves every run of the labeled sweep)."""
    def images(s, part):
        return {(int(s["labeled"][f]), int(c)) for f, c in s[part]}
    labeled = {int(f) for f in split["labeled"]}
    seen = images(denoiser_split, "train") | {(int(f), c) for f in denoiser_split["unlabeled"][:n_unlabeled]
                                                if f in labeled for c in range(len(CHARS))}
    return len(seen - images(split, "train"))


def load_glyphs(path):
    if not os.path.exists(path):
        raise common.UsageError(f"{path} not found: run `python fonts.py render` first")
    try:
        with np.load(path) as d:
            return d["glyphs"], [str(n) for n in d["names"]]
    except Exception as e:
        raise common.UsageError(f"{path} is not a glyphs file from `fonts.py render` ({e.__class__.__name__})")


def to_float(images):
    """uint8 (..., 32, 32) -> float tensor (..., 1, 32, 32) in [-1, 1] (ink = +1)."""
    return torch.from_numpy(np.asarray(images, np.float32) / 127.5 - 1).unsqueeze(-3)


def labeled_examples(glyphs, split, part):
    """(font rows, char ids, target images) of one part of the labeled data."""
    pairs = split[part]
    images = glyphs[split["labeled"][pairs[:, 0]], pairs[:, 1]]
    return torch.from_numpy(pairs[:, 0]), torch.from_numpy(pairs[:, 1]), to_float(images)


CORRUPTIONS = {   # what the denoiser learns to undo: the paper's corruptions, applied with Pillow
    "blur": lambda img, rng: img.filter(ImageFilter.GaussianBlur(rng.uniform(0, 2))),   # radius ~ U[0, 2]
    "emboss": lambda img, rng: img.filter(ImageFilter.EMBOSS),
    "contrast": lambda img, rng: ImageEnhance.Contrast(img).enhance(0.5),   # halved around the image's mean gray
}


def corrupt_batch(images, kind, rng):
    """uint8 32x32 glyphs -> their corrupted versions."""
    return np.stack([np.asarray(CORRUPTIONS[kind](Image.fromarray(image), rng)) for image in images])


# === The predictor: (font, character) -> image, a 7-layer MLP (Appendix) ===
class GlyphMLP(nn.Module):
    """Character (62-d) and font (100-d) embeddings, then 7 linear layers up to a 32x32 image in [-1, 1], as in the
    released code, with its BatchNorm1d(width, 0.8): eps 0.8 is far above the pre-norm variances, so batch norm only
    centres, the network starts near a constant gray, and L2 really limits it."""

    def __init__(self, n_fonts, dropout=0.0, bn_eps=0.8):
        super().__init__()
        self.config = dict(n_fonts=n_fonts, dropout=dropout, bn_eps=bn_eps)
        self.char_emb = nn.Embedding(len(CHARS), 62)
        self.font_emb = nn.Embedding(n_fonts, 100)
        widths = [62 + 100, 128, 256, 256, 512, 512, 1024]
        layers = []
        for i, (a, b) in enumerate(zip(widths, widths[1:])):
            layers += [nn.Linear(a, b)] + ([nn.BatchNorm1d(b, eps=bn_eps)] if i else []) + [nn.LeakyReLU(0.2)]
            layers += [nn.Dropout(dropout)] if dropout and i >= 4 else []   # the two widest layers
        layers += [nn.Linear(1024, SIZE * SIZE), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, fonts, chars):
        h = torch.cat([self.char_emb(chars), self.font_emb(fonts)], dim=1)
        return self.net(h).view(-1, 1, SIZE, SIZE)


def l2_penalty(model):
    """Sum of squared weights, biases excluded (as in the released code)."""
    return sum((p ** 2).sum() for name, p in model.named_parameters() if not name.endswith("bias"))


def image_loss(f, pi, fonts, chars, targets, reduction="mean"):
    """Squared error of Pi(f(x)), or with pi=None of f(x). Composed training is the paper's Eq. 1 with lambda = 0,
    Pi frozen; images are continuous, so the gradient flows through Pi by plain backprop (no REINFORCE)."""
    out = f(fonts, chars)
    return F.mse_loss(out if pi is None else pi(out), targets, reduction=reduction)


def adam(params, lr):
    """The authors' optimiser for every font model: Adam with beta1 = 0.5 (the GAN setting their code comes from)."""
    return torch.optim.Adam(params, lr=lr, betas=(0.5, 0.999))


@torch.no_grad()
def batched_mse(f, pi, fonts, chars, targets, batch=512):
    """Mean squared error per pixel of the predictor over a whole split."""
    f.eval()
    total = 0.0
    for i in range(0, len(targets), batch):
        total += image_loss(f, pi, fonts[i:i + batch], chars[i:i + batch], targets[i:i + batch], "sum").item()
    return total / targets.numel()


# === Checkpoints ===
def claim_output_file(path, overwrite, holds="a finished run"):
    """A run's checkpoint (or the rendered fonts) is replaced only by a run told it may (--overwrite)."""
    harness.check_output_file(path)
    if os.path.exists(path) and not overwrite:
        raise common.UsageError(f"{path} holds {holds}: --overwrite replaces it")


def load_fonts_checkpoint(path, kind):
    """harness.load_checkpoint of a "denoiser" or a "predictor"; a missing one names the command that writes it."""
    if not os.path.isfile(path):
        command = "denoiser" if kind == "denoiser" else "train --method direct|composed"
        raise common.UsageError(f"{path} not found: run `python fonts.py {command} --out {path}` first")
    ckpt = harness.load_checkpoint(path, needs=("kind", "config", "state_dict"))
    if ckpt["kind"] != kind:
        raise common.UsageError(f"{path} is a {ckpt['kind']} checkpoint, expected a {kind}")
    return ckpt


def build_denoiser(ckpt):
    pi = UNet(**ckpt["config"])
    try:
        pi.load_state_dict(ckpt["state_dict"])
    except RuntimeError:   # weights of a U-Net with other layers
        raise common.UsageError("a denoiser from an older fonts.py, whose U-Net differs: train it again")
    return pi.eval().requires_grad_(False)  # no dropout, no gradients: Pi stays bit-identical


def build_predictor(ckpt):
    f = GlyphMLP(**{"bn_eps": 1e-5, **ckpt["config"]})   # a config without bn_eps means PyTorch's default
    f.load_state_dict(ckpt["state_dict"])
    return f.eval(), build_denoiser(ckpt["denoiser"]) if ckpt["method"] == "composed" else None


def split_args(args):
    return dict(labeled_fonts=args.labeled_fonts, n_train=args.labeled, n_val=args.n_val, seed=args.split_seed)


# === Pre-training the denoiser on unlabeled fonts; training a direct or a composed predictor ===
@torch.no_grad()
def denoised_mse(pi, corrupted, clean):
    pi.eval()
    return F.mse_loss(pi(corrupted), clean).item()


def cmd_denoiser(args):
    claim_output_file(args.out, args.overwrite)
    device = harness.pick_device(args.device)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    glyphs, _ = load_glyphs(args.data)
    split = make_split(len(glyphs), **split_args(args))
    unlabeled, train, val = split["unlabeled"][:args.unlabeled], split["train"], split["val"]   # --unlabeled None: all
    # Pi's clean images: the unlabeled fonts' glyphs and the labeled training images, never val/test ones (the answers).
    clean = np.concatenate([glyphs[unlabeled].reshape(-1, SIZE, SIZE),
                            glyphs[split["labeled"][train[:, 0]], train[:, 1]]])
    val_clean = glyphs[split["labeled"][val[:, 0]], val[:, 1]]
    val_in = to_float(corrupt_batch(val_clean, args.corruption, np.random.default_rng(1))).to(device)
    val_out = to_float(val_clean).to(device)
    print(f"denoiser: {len(unlabeled)} unlabeled fonts + {len(train)} training images = {len(clean)} clean images; "
          f"corruption {args.corruption}; {args.steps} steps of {args.batch_size}; on {harness.device_name(device)}")
    pi = UNet(width=args.width, dropout=args.unet_dropout).to(device)
    opt = adam(pi.parameters(), args.lr)
    log = harness.Progress(args.steps, "denoiser steps", every_seconds=0)   # a line every --log-every steps
    for step in range(1, args.steps + 1):
        batch = clean[rng.integers(len(clean), size=args.batch_size)]
        x, y = to_float(corrupt_batch(batch, args.corruption, rng)).to(device), to_float(batch).to(device)
        pi.train()
        loss = F.mse_loss(pi(x), y)                  # learn Pi(corrupt(y)) = y
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.log_every == 0 or step == args.steps:   # the learning curve: val MSE against steps
            log.step(step - log.done, f"loss {loss.item():.4f}, val MSE {denoised_mse(pi, val_in, val_out):.4f}")
    val_mse = denoised_mse(pi, val_in, val_out)
    print(f"val: corrupted MSE {F.mse_loss(val_in, val_out).item():.4f} -> denoised MSE {val_mse:.4f}")
    harness.save_checkpoint(args.out, dict(kind="denoiser", config=pi.config, state_dict=pi.cpu().state_dict(),
                                           corruption=args.corruption, unlabeled_fonts=len(unlabeled),
                                           split=split_args(args), val_mse=val_mse, args=vars(args)))
    print(f"wrote {args.out}")


def train_predictor(args, n_fonts, data, pi, l2, device):
    """Train one predictor with one L2 strength; returns (best val MSE, its checkpoint fields)."""
    torch.manual_seed(args.seed)
    f = GlyphMLP(n_fonts, dropout=args.dropout).to(device)
    opt = adam(f.parameters(), args.lr)
    fonts, chars, targets = data["train"]
    # Drop the ragged last batch: a handful of examples would throw batch norm's statistics.
    n_full = len(targets) // args.batch_size * args.batch_size or len(targets)
    best, best_state, bad_epochs = math.inf, None, 0
    log = harness.Progress(args.epochs, f"  l2 {l2:g} epochs", every_seconds=0)   # a line every --log-every epochs
    for epoch in range(1, args.epochs + 1):
        f.train()
        for idx in torch.randperm(len(targets), device=device)[:n_full].split(args.batch_size):
            loss = image_loss(f, pi, fonts[idx], chars[idx], targets[idx])
            opt.zero_grad(set_to_none=True)
            (loss + l2 * l2_penalty(f)).backward()
            opt.step()
        val = batched_mse(f, pi, *data["val"])
        if val < best:        # early stopping: keep the weights of the best validation epoch
            best, bad_epochs = val, 0
            best_state = {k: v.detach().cpu().clone() for k, v in f.state_dict().items()}
        else:
            bad_epochs += 1
        if epoch % args.log_every == 0 or epoch == args.epochs or bad_epochs >= args.patience:
            log.step(epoch - log.done, f"train loss {loss.item():.4f}, val MSE {val:.4f} (best {best:.4f})")
        if bad_epochs >= args.patience:
            break
    return best, dict(config=f.config, state_dict=best_state)   # the model's own config: what rebuilds it


def cmd_train(args):
    claim_output_file(args.out, args.overwrite)
    device = harness.pick_device(args.device)
    pi, pi_ckpt = None, load_fonts_checkpoint(args.denoiser, "denoiser") if args.method == "composed" else None
    glyphs, names = load_glyphs(args.data)
    split = make_split(len(glyphs), **split_args(args))
    data = {part: tuple(t.to(device) for t in labeled_examples(glyphs, split, part)) for part in ("train", "val")}
    if pi_ckpt:
        seen = unseen_images_seen(make_split(len(glyphs), **pi_ckpt["split"], verbose=False),
                                  pi_ckpt["unlabeled_fonts"], split)
        if seen:
            print(f"warning: {args.denoiser} was trained on {seen} images that are val/test images of this "
                  f"run's split {split_args(args)} (its own: {pi_ckpt['split']})")
        pi = build_denoiser(pi_ckpt).to(device)
    print(f"{args.method}: {len(split['labeled'])} fonts, {len(data['train'][2])} train / "
          f"{len(data['val'][2])} val examples; L2 grid {args.l2}; on {harness.device_name(device)}")
    trained = {}
    for l2 in args.l2:   # tune the L2 strength on the validation set
        trained[l2] = train_predictor(args, len(split["labeled"]), data, pi, l2, device)
        print(f"l2 {l2:g}: best val MSE {trained[l2][0]:.4f}")
    l2 = min(trained, key=lambda k: trained[k][0])
    val, model = trained[l2]
    print(f"chose l2 {l2:g} (val MSE {val:.4f})")
    harness.save_checkpoint(args.out, dict(kind="predictor", method=args.method, **model,
                                           denoiser=pi_ckpt, l2=l2, val_mse=val, split=split_args(args),
                                           val_by_l2={str(k): v for k, (v, _) in trained.items()},
                                           labeled_names=[names[i] for i in split["labeled"]], args=vars(args)))
    print(f"wrote {args.out}")


# === Evaluation: the test-MSE table, averaged over seeds ===
def load_for_eval(path, glyphs, names):
    ckpt = load_fonts_checkpoint(path, "predictor")
    split = make_split(len(glyphs), **ckpt["split"], verbose=False)
    if [names[i] for i in split["labeled"]] != ckpt["labeled_names"]:
        raise common.UsageError(f"{path} was trained on other fonts than those in the glyphs file")
    return (ckpt, split, *build_predictor(ckpt))


def dash(value, fmt=""):
    """A table cell: value formatted, or '-' for None."""
    return "-" if value is None else format(value, fmt)


def evaluate_checkpoint(path, glyphs, names, test_pi):
    """One row of the table, printed and returned: a predictor's settings and its test MSE, of f(x) and of
    Pi(f(x)). A composed model brings its own Pi; a direct one is denoised after training by `test_pi`."""
    ckpt, split, f, pi = load_for_eval(path, glyphs, names)
    test, own = labeled_examples(glyphs, split, "test"), ckpt["denoiser"]
    d = own
    if own is None and test_pi:
        d, pi = test_pi
    composed = ckpt["method"] == "composed"
    r = dict(method=ckpt["method"], corruption=d["corruption"] if d else None,
             unlabeled=own["unlabeled_fonts"] if own else None, dropout=ckpt["config"]["dropout"], l2=ckpt["l2"],
             seed=ckpt["args"]["seed"], n_train=len(split["train"]), n_test=len(test[2]),
             f_mse=batched_mse(f, None, *test), pi_mse=batched_mse(f, pi, *test) if pi else None)
    r["mse"] = r["pi_mse"] if composed else r["f_mse"]   # what the predictor predicts
    variant = r["method"] + ("+dropout" if r["dropout"] else "")
    default_data = r["n_train"] == 2500 and not (own and own["args"]["unlabeled"] is not None)
    # The paper's number only beside our runs on the paper's data sizes (the sweeps' are in the README).
    paper = PAPER_TEST_MSE.get((variant, r["corruption"] if composed else None)) if default_data else None
    print(f"| {os.path.basename(path)} | {r['method']} | {dash(r['corruption'])} | {dash(r['unlabeled'])} | "
          f"{r['dropout']:g} | {r['l2']:g} | {r['seed']} | {r['n_train']} | {r['n_test']} | {r['f_mse']:.4f} | "
          f"{dash(r['pi_mse'], '.4f')} | **{r['mse']:.4f}** | {dash(paper)} |", flush=True)
    return r


# Two-sided 95% Student t by number of seeds; the normal's 1.96 past 10.
T_95 = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}


def mean_std(xs):
    return float(np.mean(xs)), float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0


def print_seed_summary(rows):
    """Mean ± std over seeds per setting (by training size, direct first), and composed - direct paired by seed."""
    groups = {}
    for r in rows:   # a setting: what a run is apart from its seed
        key = (r["method"], r["corruption"] if r["method"] == "composed" else None, r["dropout"], r["unlabeled"],
               r["n_train"])
        groups.setdefault(key, {})[r["seed"]] = r
    if all(len(g) < 2 for g in groups.values()):
        return
    print("\n| method | denoiser | dropout | unlabeled fonts | train | seeds | test MSE (mean ± std) | "
          "Pi(f(x)) of direct | composed - direct, paired (95% t-interval) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, g in sorted(groups.items(), key=lambda kv: (kv[0][4], kv[0][0] != "direct", str(kv[0]))):
        method, corruption, dropout, unlabeled, n_train = key
        m, sd = mean_std([r["mse"] for r in g.values()])
        denoised = [r["pi_mse"] for r in g.values() if r["pi_mse"] is not None]
        after = "-" if method == "composed" or not denoised else "%.4f ± %.4f" % mean_std(denoised)
        paired = "-"
        direct = groups.get(("direct", None, 0.0, None, n_train), {})   # same training size
        seeds = sorted(set(g) & set(direct))
        if method == "composed" and seeds:
            diff, diff_sd = mean_std([g[s]["mse"] - direct[s]["mse"] for s in seeds])
            half = T_95.get(len(seeds), 1.96) * diff_sd / math.sqrt(len(seeds))   # 95% t-interval's half-width
            paired = f"{diff:+.4f} ± {half:.4f} ({len(seeds)} seeds)" if len(seeds) > 1 else f"{diff:+.4f} (1 seed)"
        print(f"| {method} | {dash(corruption)} | {dropout:g} | {dash(unlabeled)} | "
              f"{n_train} | {len(g)} | {m:.4f} ± {sd:.4f} | {after} | {paired} |")


def cmd_evaluate(args):
    for path, flag in ((args.png, "--png"), (args.plot, "--plot")):
        if path:
            harness.check_output_file(path, flag)
    args.runs = args.runs or "runs/fonts"
    direct, composed = (os.path.join(args.runs, m + ".pt") for m in ("direct", "composed"))
    samples = not args.checkpoints and os.path.exists(direct) and os.path.exists(composed)
    if args.png and not samples:
        raise common.UsageError(f"--png draws {direct} and {composed}: train both first")
    glyphs, names = load_glyphs(args.data)
    paths = args.checkpoints or sorted(p for p in glob.glob(os.path.join(args.runs, "*.pt"))
                                       if harness.load_checkpoint(p, needs=("kind",))["kind"] == "predictor")
    if not paths:
        raise common.UsageError(f"no predictor checkpoint in {args.runs}: run `python fonts.py train` first")
    runs_pi = os.path.join(args.runs, "denoiser.pt")
    if args.denoiser is None and os.path.exists(runs_pi):   # --runs' Pi where there is one; a Pi named must exist
        args.denoiser = runs_pi
    test_pi = None
    if args.denoiser not in (None, "none"):
        ckpt = load_fonts_checkpoint(args.denoiser, "denoiser")
        test_pi = (ckpt, build_denoiser(ckpt))
    print("| checkpoint | method | denoiser | unlabeled fonts | dropout | L2 | seed | train | test | "
          "f(x) MSE | Pi(f(x)) MSE | test MSE | paper |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [evaluate_checkpoint(path, glyphs, names, test_pi) for path in paths]
    print_seed_summary(rows)
    if args.plot:
        plot_sweep(rows, args.plot)
    if samples:
        save_samples(glyphs, names, direct, composed, args.png or os.path.join(args.runs, "samples.png"))


# === Pictures: Figure 6's sweeps as line plots, Figure 5's glyph grid (Pillow only) ===
def plot_sweep(rows, png, size=(520, 360), margin=(70, 40, 20, 50)):
    """Figure 6: test MSE against the labeled examples or, when those are the same in every run, the unlabeled
    fonts. A line per method (mean over seeds, bars from the lowest to the highest seed); direct, Pi-less, is flat."""
    by_labeled = len({r["n_train"] for r in rows}) > 1
    x_of = (lambda r: r["n_train"]) if by_labeled else (lambda r: r["unlabeled"])
    xs = sorted({x_of(r) for r in rows if x_of(r) is not None})
    points = {}   # method: {x: test MSEs}
    for r in rows:
        for x in (xs if r["method"] == "direct" and not by_labeled else [x_of(r)]):
            points.setdefault(r["method"], {}).setdefault(x, []).append(r["mse"])
    lines = {m: sorted((x, np.mean(v), min(v), max(v)) for x, v in points[m].items())   # (x, mean, low, high)
             for m in ("direct", "composed") if m in points}
    if not xs or not lines:
        raise common.UsageError("--plot needs direct or composed checkpoints of a labeled or unlabeled sweep")
    xlabel = "labeled training examples" if by_labeled else "unlabeled fonts for the denoiser"
    left, top, right, bottom = margin
    w, h = size[0] - left - right, size[1] - top - bottom
    img = Image.new("RGB", size, "white")
    draw, font = ImageDraw.Draw(img), ImageFont.load_default(size=12)
    y0, y1 = min(p[2] for pts in lines.values() for p in pts), max(p[3] for pts in lines.values() for p in pts)
    pad = (y1 - y0) * 0.1 or 0.005
    y0, y1 = y0 - pad, y1 + pad

    def to_px(x, y):   # x placed by rank
        return left + (w * (xs.index(x) + 0.5) / len(xs)), top + h * (y1 - y) / (y1 - y0)
    for k in range(5):   # y ticks and grid
        y = y0 + (y1 - y0) * k / 4
        _, py = to_px(xs[0], y)
        draw.line([left, py, left + w, py], fill=(225, 225, 225))
        draw.text((left - 6, py), f"{y:.3f}", fill="black", font=font, anchor="rm")
    draw.rectangle([left, top, left + w, top + h], outline="black")
    for x in xs:
        draw.text((to_px(x, y0)[0], top + h + 6), str(x), fill="black", font=font, anchor="ma")
    draw.text((left + w / 2, size[1] - 6), xlabel, fill="black", font=font, anchor="md")
    draw.text((left + w / 2, 6), "test MSE against " + xlabel, fill="black", font=font, anchor="ma")
    for n, (name, pts) in enumerate(lines.items()):
        color = {"direct": (200, 60, 40), "composed": (30, 90, 200)}[name]
        coords = [to_px(x, m) for x, m, _, _ in pts]
        if len(coords) > 1:
            draw.line(coords, fill=color, width=2)
        for (x, _, lo, hi), (px, py) in zip(pts, coords):
            draw.line([to_px(x, lo), to_px(x, hi)], fill=color, width=1)
            draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill=color)
        draw.text((left + w - 10, top + 8 + 16 * n), name, fill=color, font=font, anchor="ra")  # top right: sweeps fall
    os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
    img.save(png)
    print(f"wrote {png}")


def panel(images, title, in_train):
    """A grid of glyphs (rows: fonts, columns: A-J) with a title; a thin gray frame marks training examples."""
    cell, pad = SIZE * 2, 2
    n_rows, n_cols = images.shape[:2]
    img = Image.new("RGB", (n_cols * (cell + pad) + pad, n_rows * (cell + pad) + pad + 20), "white")
    draw = ImageDraw.Draw(img)
    draw.text((4, 2), title, fill="black", font=ImageFont.load_default(size=14))
    for r, c in np.ndindex(n_rows, n_cols):
        x, y = pad + c * (cell + pad), 20 + pad + r * (cell + pad)
        glyph = Image.fromarray(255 - images[r, c]).resize((cell, cell), Image.NEAREST)  # black ink on white
        img.paste(glyph.convert("RGB"), (x, y))
        if in_train[r, c]:
            draw.rectangle([x - 1, y - 1, x + cell, y + cell], outline=(160, 160, 160))
    return img


def save_samples(glyphs, names, direct_path, composed_path, png):
    """Figure 5: letters A-J of 10 random labeled fonts: target / direct / composed / base."""
    _, split, f_direct, _ = load_for_eval(direct_path, glyphs, names)
    ckpt, split_c, f_base, pi = load_for_eval(composed_path, glyphs, names)
    if not np.array_equal(split["labeled"], split_c["labeled"]):
        raise common.UsageError("direct and composed checkpoints use different labeled fonts")
    n = min(10, len(split["labeled"]))
    rows = np.random.default_rng(0).choice(len(split["labeled"]), n, replace=False)
    cols = [CHARS.index(c) for c in "ABCDEFGHIJ"]
    font_ids, char_ids = torch.tensor(np.repeat(rows, 10)), torch.tensor(np.tile(cols, n))

    def to_u8(t):   # [-1, 1] model outputs -> uint8 glyphs, (fonts, letters, 32, 32)
        return ((t.numpy() + 1) * 127.5).round().clip(0, 255).astype(np.uint8).reshape(n, 10, SIZE, SIZE)
    with torch.no_grad():
        base = f_base(font_ids, char_ids)
        outs = [glyphs[split["labeled"][rows]][:, cols], to_u8(f_direct(font_ids, char_ids)),
                to_u8(pi(base)), to_u8(base)]
    train = {tuple(p) for p in split["train"].tolist()}
    in_train = np.array([[(r, c) in train for c in cols] for r in rows])
    titles = ["target", "direct f(x)", f"composed Pi(f(x)), Pi: {ckpt['denoiser']['corruption']}", "base f(x)"]
    panels = [panel(o, t, in_train) for o, t in zip(outs, titles)]
    grid = Image.new("RGB", (sum(p.width for p in panels) + 10 * 3, panels[0].height), "white")
    for i, p in enumerate(panels):
        grid.paste(p, (i * (p.width + 10), 0))
    os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
    grid.save(png)
    print(f"wrote {png} (fonts: {', '.join(names[split['labeled'][r]] for r in rows[:3])}, ...)")


# === Command line ===
def main(argv=None):
    parser = harness.ArgumentParser(prog="fonts.py", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)

    def subcommand(name, text, example):
        return sub.add_parser(name, help=text, description=f"{text}.\n\n    {example}\n\n(python fonts.py --help: "
                              "the whole pipeline.)")
    p = subcommand("render", "render 0-9A-Za-z of every usable font file",
                   "python fonts.py render [--font-dir DIR]   # -> data/fonts/glyphs.npz")
    p.add_argument("--font-dir", action="append", default=[], help="extra folder of .ttf/.otf/.ttc (repeatable)")
    p.add_argument("--no-system-fonts", action="store_true", help="only look in --font-dir")
    p.add_argument("--render-size", type=int, default=64, help="font size in pixels before downscaling")
    p.add_argument("--duplicate-mse", type=float, default=0.003, help="closer than this to a kept font = duplicate")
    p.add_argument("--out", default="data/fonts/glyphs.npz", help="the glyph array to write")
    p.add_argument("--overwrite", action="store_true", help="replace the glyph array --out names, if one is there")
    denoiser = subcommand("denoiser", "pre-train the U-Net denoiser on unlabeled fonts",
                          "python fonts.py denoiser [--corruption blur|emboss|contrast]   # -> runs/fonts/denoiser.pt")
    train = subcommand("train", "train a direct or a composed predictor",
                       "python fonts.py train --method direct|composed   # -> runs/fonts/<method>.pt")
    evaluate = subcommand("evaluate", "test MSE table and a sample grid like Figure 5",
                          "python fonts.py evaluate [--runs runs/fonts]   # the table + samples.png in --runs")
    for p in (denoiser, train, evaluate):
        p.add_argument("--data", default="data/fonts/glyphs.npz", help="what fonts.py render wrote")
    for p in (denoiser, train):
        p.add_argument("--preset", choices=["cpu", "paper", "smoke"], default="cpu",
                       help="cpu: minutes on 2 cores; paper: the authors' budget, for a GPU; smoke: the tests")
        p.add_argument("--labeled-fonts", type=int, default=100, help="fonts whose glyphs may be labeled")
        p.add_argument("--labeled", type=int, default=2500, help="labeled training examples")
        p.add_argument("--n-val", type=int, default=100, help="labeled validation examples")
        p.add_argument("--split-seed", type=int, default=0, help="which fonts are labeled, which pairs train")
        p.add_argument("--seed", type=int, default=0, help="initialisation, batches and noise")
        p.add_argument("--batch-size", type=int, help="(default: the preset's)")
        p.add_argument("--lr", type=float, help="Adam's rate (default: the preset's)")
        p.add_argument("--device", help="default: cuda if available, else cpu")
        p.add_argument("--overwrite", action="store_true", help="replace the checkpoint --out names, if one is there")
    denoiser.add_argument("--corruption", choices=list(CORRUPTIONS), default="blur", help="what Pi learns to undo")
    denoiser.add_argument("--unlabeled", type=int, help="use only the first N unlabeled fonts (default: all)")
    denoiser.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    denoiser.add_argument("--width", type=int, help="U-Net channels at the first level")
    denoiser.add_argument("--unet-dropout", type=float, help="(default: the preset's)")
    denoiser.add_argument("--log-every", type=int, default=100, help="steps between progress lines")
    denoiser.add_argument("--out", default=DEFAULT_DENOISER, help="the checkpoint to write")
    train.add_argument("--method", choices=["direct", "composed"], required=True, help="f alone, or through Pi")
    train.add_argument("--denoiser", help=f"composed: the frozen Pi (default: {DEFAULT_DENOISER})")
    train.add_argument("--l2", type=float, nargs="+", help="strengths of an L2 penalty on the loss to try, chosen "
                       "on validation (the authors'; not the decoupled --weight-decay of the SansType scripts' AdamW)")
    train.add_argument("--dropout", type=float, default=0.0, help="in the predictor")
    train.add_argument("--epochs", type=int, help="(default: the preset's)")
    train.add_argument("--patience", type=int, help="stop after this many epochs without a better val MSE")
    train.add_argument("--log-every", type=int, default=10, help="epochs between progress lines")
    train.add_argument("--out", help="default: runs/fonts/<method>.pt")
    evaluate.add_argument("checkpoints", nargs="*", help="predictor checkpoints (default: all in --runs)")
    evaluate.add_argument("--runs", help="folder of the checkpoints (default: runs/fonts)")
    evaluate.add_argument("--png", help="Figure 5's grid of --runs' direct and composed.pt "
                          "(default: samples.png in --runs)")
    evaluate.add_argument("--denoiser", help="Pi applied after training to direct predictors' outputs (default: "
                          "denoiser.pt in --runs if it exists; 'none': skip)")
    evaluate.add_argument("--plot", help="draw test MSE against the sweep's variable (Figure 6) into this PNG")

    args = parser.parse_args(argv)
    for key, row in {"denoiser": DENOISER_PRESETS, "train": TRAIN_PRESETS}.get(args.cmd, {}).items():
        if getattr(args, key) is None:  # a flag left unset takes the preset's value
            setattr(args, key, row[("paper", "cpu", "smoke").index(args.preset)])
    harness.check_ranges(parser, args, positive="lr", fraction="dropout unet_dropout",  # one-line errors
                         at_least_1="steps epochs patience batch_size width log_every labeled_fonts labeled n_val "
                                    "render_size", not_negative="unlabeled seed split_seed l2 duplicate_mse")
    if args.cmd == "train":
        if args.method == "direct" and args.denoiser:
            parser.error("--denoiser is for --method composed (direct trains f alone)")
        args.denoiser = args.denoiser or DEFAULT_DENOISER
        args.out = args.out or f"runs/fonts/{args.method}.pt"
    if args.cmd == "evaluate" and args.checkpoints and (args.runs or args.png):
        parser.error("--runs and --png are for the checkpoints in --runs: name no checkpoints with them")
    work = {"render": cmd_render, "denoiser": cmd_denoiser, "train": cmd_train, "evaluate": cmd_evaluate}[args.cmd]
    harness.run_main("fonts.py", work, args)  # bad input: one line on stderr, exit code 2


if __name__ == "__main__":
    main()
