"""The efficiency benchmarks run at a tiny size and print their tables with the paper's figures beside ours:
benchmarks/essm_diagonal_fft.py (eSSM Fig. 7), benchmarks/essm_fig1.py (eSSM Figs. 1 and 6),
benchmarks/essm_heads_time.py (eSSM Table 4) and
benchmarks/ssm2d_train_time.py (2-D SSM Table 1, train time)."""
from benchmarks import essm_diagonal_fft, essm_fig1, essm_heads_time, ssm2d_train_time


def test_essm_diagonal_fft_prints_both_tables_and_writes_the_plot(capsys, tmp_path):
    png = tmp_path / "fig7.png"
    essm_diagonal_fft.main(["--width", "8", "--length", "12", "--batch", "2", "--repeat", "1", "--plot", str(png)])
    out = capsys.readouterr().out
    for text in ("| Vanilla ", "| Diagonal + FFT ", "20.90k", "8.70k", "| Vanilla / Diagonal ", "74.37x",
                 "22.93x", "| Diagonal / Diagonal + FFT "):
        assert text in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ssm2d_train_time_prints_ours_and_the_papers_ratio(capsys):
    ssm2d_train_time.main(["--batch", "1", "--repeat", "1", "--rows", "ViT", "ViT w/ SSM-r"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ViT")]
    assert len(rows) == 2 and "| 1.00x " in rows[0] and "| 2.66x " in rows[1]


def test_essm_fig1_prints_every_model_at_every_size_and_writes_the_plot(capsys, tmp_path):
    png = tmp_path / "fig1.png"
    essm_fig1.main(["--widths", "32", "64", "--lengths", "16", "24", "--batch", "2", "--plot", str(png)])
    out = capsys.readouterr().out
    for heading in ("H = 32, L = 24", "H = 64, L = 24", "H = 64, L = 16", "Fig. 6"):
        assert heading in out
    rows = [line for line in out.splitlines() if line.startswith("| eSSM ")]
    assert len(rows) == 3 + 1  # three Fig. 1 tables and Fig. 6
    assert all("| 100.0 % " in row and "| 1.00x " in row for row in rows[:3])
    assert "| +0 " in rows[3]  # eSSM's bidirectional kernel adds no parameters
    for name in ("Transformer", "LSTM", "S4", "Mamba"):
        assert sum(line.startswith(f"| {name} ") for line in out.splitlines()) >= 3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_essm_heads_time_prints_each_head_count_beside_table_4(capsys):
    essm_heads_time.main(["--lengths", "16", "512", "--batch", "1", "--width", "64"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| S = ")]
    assert [row.split("|")[1].strip() for row in rows] == ["S = 4", "S = 16", "S = 64"]
    assert "(1.00) / 42.3 s (1.00)" in rows[0] and "/ 40.3 s (0.95)" in rows[2] and "75.5k" in rows[0]
