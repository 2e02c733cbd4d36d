"""Tests for fonts.py and the U-Net of common.py. They only use Pillow's built-in scalable font
(Aileron, `ImageFont.load_default(size=...)`), so nothing has to be installed."""
import numpy as np
import pytest
import torch
from PIL import Image, ImageFont

import fonts
from common import UNet


@pytest.fixture(scope="module")
def aileron():
    return fonts.render_font(ImageFont.load_default(size=48))


def ink_rows(glyph):
    return np.nonzero(glyph.any(1))[0]


def test_render_shapes_margin_and_shared_baseline(aileron):
    g = aileron
    assert g.shape == (62, 32, 32) and g.dtype == np.uint8
    assert all(glyph.max() > 200 for glyph in g)              # every glyph has solid ink
    border = np.concatenate([g[:, 0], g[:, -1], g[:, :, 0], g[:, :, -1]], axis=1)
    assert border.max() == 0                                   # a 1-pixel margin everywhere
    up, low = fonts.CHARS.index("O"), fonts.CHARS.index("o")
    assert len(ink_rows(g[up])) > len(ink_rows(g[low])) + 3   # one scale per font: 'O' taller than 'o'
    bottoms = {ink_rows(g[fonts.CHARS.index(c)])[-1] for c in "ABEHMZ"}
    assert max(bottoms) - min(bottoms) <= 1                     # capitals sit on one baseline


def test_render_rejects_blank_and_missing_glyphs():
    font = ImageFont.load_default(size=48)
    assert fonts.render_font(font, chars="A ").startswith("blank glyph")
    assert isinstance(fonts.render_font(font, chars="A\u4e2d"), str)   # no CJK in Aileron
    assert not isinstance(fonts.render_font(font, chars="AB"), str)


def test_duplicate_filter(aileron):
    dedup = fonts.DuplicateFilter()
    assert dedup.add(aileron)
    assert not dedup.add(aileron.copy())                                       # the same design twice
    noisy = np.clip(aileron + np.random.default_rng(0).integers(-3, 4, aileron.shape), 0, 255)
    assert not dedup.add(noisy.astype(np.uint8))                               # a slightly different build
    bold = np.maximum(aileron, np.roll(aileron, 1, axis=2))                    # a bolder style
    bold = np.maximum(bold, np.roll(bold, 1, axis=1))
    assert dedup.add(bold)
    assert len(dedup.kept) == 2


def test_render_command_on_font_files(tmp_path, capsys):
    ttf = ImageFont.load_default(size=20).path.getvalue()      # Pillow's embedded Aileron .ttf bytes
    (tmp_path / "a.ttf").write_bytes(ttf)
    (tmp_path / "copy.ttf").write_bytes(ttf)
    (tmp_path / "broken.ttf").write_bytes(b"not a font")
    out = tmp_path / "glyphs.npz"
    fonts.main(["render", "--no-system-fonts", "--font-dir", str(tmp_path), "--out", str(out)])
    log = capsys.readouterr().out
    assert "found 3 font files" in log and "kept 1 fonts" in log
    assert "near-duplicate" in log and "unreadable" in log
    glyphs, names = fonts.load_glyphs(str(out))
    assert glyphs.shape == (1, 62, 32, 32) and "Aileron" in names[0]


def test_split_sizes_and_disjointness(capsys):
    s = fonts.make_split(300)
    assert len(s["labeled"]) == 100 and len(s["unlabeled"]) == 200
    assert not set(s["labeled"]) & set(s["unlabeled"])
    sizes = [len(s[p]) for p in ("train", "val", "test")]
    assert sizes == [2500, 100, 3600]
    pairs = [tuple(p) for part in ("train", "val", "test") for p in s[part].tolist()]
    assert len(set(pairs)) == 6200                              # disjoint and complete
    assert max(p[0] for p in pairs) == 99 and max(p[1] for p in pairs) == 61
    assert np.array_equal(fonts.make_split(300)["train"], s["train"])    # deterministic
    assert capsys.readouterr().out == ""
    small = fonts.make_split(50)                                 # too few fonts: shrink, and say so
    assert len(small["labeled"]) == 25 and len(small["train"]) == 625
    assert "only 50 usable fonts" in capsys.readouterr().out


def test_corruptions(aileron):
    rng = np.random.default_rng(0)
    g = aileron[fonts.CHARS.index("H")]
    blur = fonts.corrupt_batch(np.stack([g] * 20), "blur", rng)
    assert blur.shape == (20, 32, 32) and blur.dtype == np.uint8
    radii_differ = len({b.tobytes() for b in blur}) > 10        # radius ~ U[0, 2], fresh each call
    assert radii_differ and np.mean([(b.astype(int) - g).__abs__().mean() for b in blur]) > 2
    assert abs(blur.astype(float).mean() - g.mean()) < 3         # a blur moves ink, keeps its amount
    emboss = fonts.corrupt_batch(g[None], "emboss", rng)[0]
    assert np.median(emboss) == 128 and emboss.min() < 100 and emboss.max() > 160
    contrast = fonts.corrupt_batch(g[None], "contrast", rng)[0].astype(float)
    assert contrast.std() == pytest.approx(g.std() / 2, rel=0.05)


def test_unet_shapes_and_it_learns_to_undo_a_blur():
    """A glyph-sized image in, one out; 60 Adam steps on blurred glyphs bring its output nearer the clean ones."""
    for width in (4, 8):
        assert UNet(width=width)(torch.randn(3, 1, 32, 32) * 3).shape == (3, 1, 32, 32)
    torch.manual_seed(0)
    clean = torch.zeros(8, 1, 32, 32) - 1
    for i in range(8):  # white bars on black, of different widths and places
        clean[i, 0, 4 + i:20 + i, 8 + i:10 + 2 * i] = 1
    blurred = torch.nn.functional.avg_pool2d(clean, 5, stride=1, padding=2)
    pi = UNet(width=8)
    optimizer = torch.optim.Adam(pi.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        loss = torch.nn.functional.mse_loss(pi(blurred), clean)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_unet_is_the_authors_no_bias_and_output_from_16x16_features():
    pi = UNet(width=8)
    convs = [m for m in pi.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d))]
    assert len(convs) == 6 and all(c.bias is None for c in convs)
    upsample, pad, head, tanh = pi.final
    assert isinstance(upsample, torch.nn.Upsample) and head.in_channels == 2 * 8 and head.kernel_size == (4, 4)
    # The head sees only the 16x16 maps: shifting them by a column shifts the output by two pixels.
    u2 = torch.randn(1, 16, 16, 16)
    out, shifted = pi.final(u2), pi.final(torch.roll(u2, 1, dims=3))
    assert torch.allclose(torch.roll(out, 2, dims=3)[..., 4:-4], shifted[..., 4:-4], atol=1e-6)


def test_predictor_batch_norm_only_centres_so_a_fresh_model_is_near_constant():
    # The authors' BatchNorm1d(width, 0.8): eps 0.8 dwarfs the pre-norm variances, so a fresh
    # predictor starts near a constant gray; with PyTorch's default eps it would not.
    torch.manual_seed(0)
    fonts_, chars = torch.arange(64) % 10, torch.arange(64) % 62
    spread = {}
    for eps in (0.8, 1e-5):
        f = fonts.GlyphMLP(n_fonts=10, bn_eps=eps).train()
        spread[eps] = f(fonts_, chars).std(dim=0).mean().item()
        assert all(m.eps == eps for m in f.modules() if isinstance(m, torch.nn.BatchNorm1d))
    assert fonts.GlyphMLP(n_fonts=10).config["bn_eps"] == 0.8          # the default
    assert spread[0.8] < 0.02 and spread[1e-5] > 0.1
    opt = fonts.adam(f.parameters(), 1e-3)
    assert opt.defaults["betas"] == (0.5, 0.999)


def test_composed_step_lowers_loss_and_leaves_denoiser_untouched():
    torch.manual_seed(0)
    f = fonts.GlyphMLP(n_fonts=4)
    pi = UNet(width=4).eval().requires_grad_(False)
    before = {k: v.clone() for k, v in pi.state_dict().items()}
    font_ids, chars = torch.arange(8) % 4, torch.arange(8)
    targets = torch.rand(8, 1, 32, 32) * 2 - 1
    opt = torch.optim.Adam(f.parameters(), lr=1e-3)
    losses = []
    for _ in range(10):
        f.train()
        loss = fonts.image_loss(f, pi, font_ids, chars, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 1e-3
    assert all(p.grad is None for p in pi.parameters())
    assert all(torch.equal(before[k], v) for k, v in pi.state_dict().items())   # bit-identical
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in f.parameters())


def test_whole_chain_with_smoke_preset(tmp_path, aileron, capsys, monkeypatch):
    # 20 "fonts": Aileron shifted around, enough for 10 labeled fonts and a Figure-5 grid.
    glyphs = np.stack([np.roll(aileron, (i % 5 - 2, i // 5 - 2), axis=(1, 2)) for i in range(20)])
    data = str(tmp_path / "glyphs.npz")
    np.savez(data, glyphs=glyphs, names=np.array([f"font{i}" for i in range(20)]))
    runs = tmp_path / "runs"
    common = ["--data", data, "--preset", "smoke"]
    fonts.main(["denoiser", *common, "--out", str(runs / "denoiser.pt")])
    fonts.main(["train", "--method", "direct", *common, "--out", str(runs / "direct.pt")])
    fonts.main(["train", "--method", "composed", *common, "--denoiser", str(runs / "denoiser.pt"),
                "--out", str(runs / "composed.pt")])
    ckpt = fonts.load_fonts_checkpoint(str(runs / "composed.pt"), "predictor")
    assert ckpt["denoiser"]["corruption"] == "blur"
    assert ckpt["l2"] == float(min(ckpt["val_by_l2"], key=ckpt["val_by_l2"].get))  # the L2 with the best val MSE
    for name in ("direct", "composed"):   # a checkpoint rebuilds the very model that was validated
        saved = fonts.load_fonts_checkpoint(str(runs / f"{name}.pt"), "predictor")
        glyphs_, _ = fonts.load_glyphs(data)
        split = fonts.make_split(len(glyphs_), **saved["split"], verbose=False)
        f, pi = fonts.build_predictor(saved)
        val = fonts.batched_mse(f, pi, *fonts.labeled_examples(glyphs_, split, "val"))
        assert val == pytest.approx(saved["val_mse"], rel=1e-5) and saved["config"]["bn_eps"] == 0.8
    assert set(ckpt["val_by_l2"]) == {"0", "0.0001"}
    capsys.readouterr()
    png = tmp_path / "samples.png"
    fonts.main(["evaluate", "--data", data, "--runs", str(runs), "--png", str(png),
                "--denoiser", str(runs / "denoiser.pt")])
    table = capsys.readouterr().out
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in table.splitlines() if ".pt |" in line}
    assert rows["composed.pt"][1:3] == ["composed", "blur"]
    # The direct model, denoised after training by the given Pi: both of its MSEs are reported.
    direct = rows["direct.pt"]
    assert direct[1:3] == ["direct", "blur"] and direct[9] != direct[10] and direct[11] == f"**{direct[9]}**"
    grid = np.asarray(Image.open(png).convert("L"))  # 4 panels (target, direct, composed, base), 10 px apart
    width = (grid.shape[1] - 30) // 4
    assert grid.shape[1] == 4 * width + 30 and all((grid[:, k * (width + 10) - 10:k * (width + 10)] == 255).all()
                                                   for k in (1, 2, 3))
    target = grid[22:, :width]  # below its title: the gold glyphs, black ink on white
    assert (target < 64).mean() > 0.05 and (target > 192).mean() > 0.3
    assert not list(runs.glob("*.tmp"))                          # checkpoints written atomically
    monkeypatch.chdir(tmp_path)  # evaluate --runs alone: the grid goes into --runs, Pi comes from it, nothing else
    fonts.main(["evaluate", "--data", data, "--runs", str(runs)])
    direct = next(line.split(" | ") for line in capsys.readouterr().out.splitlines() if "direct.pt |" in line)
    assert direct[2] == "blur" and (runs / "samples.png").exists() and not (tmp_path / "runs" / "fonts").exists()
    with pytest.raises(SystemExit) as e:   # a Pi named but missing is an error, not a silent skip
        fonts.main(["evaluate", "--data", data, "--runs", str(runs), "--denoiser", str(runs / "typo.pt")])
    assert e.value.code == 2 and "typo.pt not found" in capsys.readouterr().err


def test_bad_input_exits_with_code_2(tmp_path, capsys):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"junk")
    empty = tmp_path / "empty"
    empty.mkdir()
    for argv in (["evaluate", str(junk), "--data", str(junk)],
                 ["evaluate", "--data", str(tmp_path / "missing.npz")],
                 ["render", "--no-system-fonts", "--font-dir", str(empty), "--out", str(tmp_path / "g.npz")],
                 ["train", "--method", "reinforce"]):
        with pytest.raises(SystemExit) as e:
            fonts.main(argv)
        assert e.value.code == 2
        stderr = capsys.readouterr().err.strip().splitlines()
        assert len(stderr) == 1 and stderr[0].startswith(("fonts.py: error: ", "fonts.py train: error: ")), stderr


def one_line_error(argv, capsys):
    """The message of a fonts.py run that must fail with one line on stderr and exit code 2."""
    with pytest.raises(SystemExit) as e:
        fonts.main(argv)
    stderr = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(stderr) == 1, stderr
    return stderr[0]


def test_method_is_a_choice_and_smoke_is_the_test_preset(capsys):
    assert "invalid choice: 'reinforce'" in one_line_error(["train", "--method", "reinforce"], capsys)
    # every setting has a value for each preset: paper, cpu, smoke
    assert all(len(row) == 3 for table in (fonts.DENOISER_PRESETS, fonts.TRAIN_PRESETS) for row in table.values())


def test_missing_inputs_name_the_command_that_writes_them(tmp_path, capsys):
    data = str(tmp_path / "glyphs.npz")
    np.savez(data, glyphs=np.zeros((4, 62, 32, 32), np.uint8), names=np.array(["a", "b", "c", "d"]))
    pi = str(tmp_path / "denoiser.pt")
    error = one_line_error(["train", "--method", "composed", "--data", data, "--denoiser", pi], capsys)
    assert f"{pi} not found: run `python fonts.py denoiser --out {pi}` first" in error
    error = one_line_error(["evaluate", str(tmp_path / "direct.pt"), "--data", data], capsys)
    assert "run `python fonts.py train --method direct|composed" in error


def test_bad_numbers_and_ignored_flags_are_errors(tmp_path, capsys):
    data = ["--data", str(tmp_path / "missing.npz")]   # the flags must be refused before the data is read
    for argv, flag in [(["train", "--method", "direct", "--epochs", "0"], "--epochs 0"),
                       (["denoiser", "--steps", "-1"], "--steps -1"),
                       (["train", "--method", "direct", "--labeled", "-5"], "--labeled -5"),
                       (["train", "--method", "direct", "--l2", "0", "-0.001"], "--l2 -0.001"),
                       (["denoiser", "--unlabeled", "-3"], "--unlabeled -3"),
                       (["train", "--method", "composed", "--dropout", "1"], "--dropout 1"),
                       (["train", "--method", "direct", "--denoiser", "pi.pt"], "--denoiser"),  # direct has no Pi
                       (["evaluate", "direct.pt", "--png", "grid.png"], "--png"),              # the grid needs --runs
                       (["evaluate", "--runs", str(tmp_path), "--png", "grid.png"], "--png")]:  # ... with both models
        assert flag in one_line_error(argv + data, capsys), argv


def fake_row(method, seed, mse, n_train=2500, unlabeled=None):
    return dict(method=method, corruption="blur" if method == "composed" else None, dropout=0.0, seed=seed,
                unlabeled=unlabeled if method == "composed" else None, n_train=n_train, mse=mse,
                pi_mse=mse if method == "composed" else None)


def test_seed_summary_pairs_composed_with_direct_by_seed(capsys):
    rows = [fake_row("direct", s, m) for s, m in ((0, 0.20), (1, 0.22), (2, 0.21))]
    rows += [fake_row("composed", s, m) for s, m in ((0, 0.18), (1, 0.21), (2, 0.18))]
    fonts.print_seed_summary(rows)
    out = capsys.readouterr().out
    assert "| direct | - | 0 | - | 2500 | 3 | 0.2100 ± 0.0100 |" in out
    # Paired differences -0.02, -0.01, -0.03: mean -0.02, std 0.01, 95% half-width 4.30 * 0.01 / sqrt(3).
    assert "| composed | blur | 0 | - | 2500 | 3 | 0.1900 ± 0.0173 | - | -0.0200 ± 0.0248 (3 seeds) |" in out


def test_seed_summary_lists_a_sweep_by_training_size_direct_first(capsys):
    # In glob order (composed_n4500, composed_n500, direct_n4500, direct_n500), 4500 would come before 500.
    rows = [fake_row(m, s, 0.2, n_train=n) for m in ("composed", "direct") for n in (4500, 500) for s in (0, 1)]
    fonts.print_seed_summary(rows)
    table = [line.split(" | ") for line in capsys.readouterr().out.splitlines()
             if line.startswith(("| direct", "| composed"))]
    assert [(cells[0], cells[4]) for cells in table] == [("| direct", "500"), ("| composed", "500"),
                                                        ("| direct", "4500"), ("| composed", "4500")]


def test_sweep_plot_draws_both_methods(tmp_path):
    rows = [fake_row(m, s, mse + 0.01 * s + (0.05 if m == "composed" else 0), n_train=n)
            for n, mse in ((500, 0.3), (2500, 0.2)) for m in ("direct", "composed") for s in (0, 1)]
    png = tmp_path / "labeled.png"
    fonts.plot_sweep(rows, str(png))
    left_half = {tuple(p) for p in np.asarray(Image.open(png))[:, :260].reshape(-1, 3)}   # the legend is top right
    assert (200, 60, 40) in left_half and (30, 90, 200) in left_half        # a direct and a composed line
    with pytest.raises(fonts.common.UsageError):
        fonts.plot_sweep([], str(png))


def test_denoiser_leak_check_counts_val_and_test_images_exactly():
    split = fonts.make_split(400, seed=0, verbose=False)
    small = fonts.make_split(400, n_train=500, seed=0, verbose=False)
    big = fonts.make_split(400, n_train=4500, seed=0, verbose=False)
    # Pi trained beside the 500-example run saw only images that are training images of every bigger run ...
    assert fonts.unseen_images_seen(small, 300, split) == 0 and fonts.unseen_images_seen(small, 300, big) == 0
    # ... but the default run's Pi saw 2000 images that the 500-example run keeps for val and test.
    assert fonts.unseen_images_seen(split, 300, small) == 2000
    # Another split seed labels other fonts: the labeled fonts that were its unlabeled ones leak whole.
    other = fonts.make_split(400, seed=1, verbose=False)
    n_shared = len(set(other["unlabeled"][:300].tolist()) & set(split["labeled"].tolist()))
    assert n_shared > 0 and fonts.unseen_images_seen(other, 300, split) >= n_shared * 62 - 2500
    assert fonts.unseen_images_seen(other, 0, split) <= 2500
