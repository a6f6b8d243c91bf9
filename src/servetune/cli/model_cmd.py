"""`servetune model make PRESET DIR`."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import ServetuneError
from ..models.presets import PRESETS, make_model
from .paths import writable_dir


def make(
    preset: str = typer.Argument(..., help=f"one of: {', '.join(PRESETS)}"),
    out_dir: Path = typer.Argument(..., help="directory to write (new or empty)"),
    force: bool = typer.Option(False, "--force", help="write into a directory that already holds files "
                               "(a model's config.json and tokenizer.json are replaced)"),
) -> None:
    """Write config.json, generation_config.json and a synthetic tokenizer."""
    if preset not in PRESETS:
        raise ServetuneError(f"unknown model preset {preset!r}; known: {', '.join(PRESETS)}")
    check_model_dir(out_dir, force)
    path = make_model(preset, out_dir)
    typer.echo(str(path))


def list_presets() -> None:
    """List the model presets."""
    for name, cfg in PRESETS.items():
        typer.echo(f"{name}: {cfg['architectures'][0]}, {cfg['num_hidden_layers']} layers, "
                   f"hidden {cfg['hidden_size']}, vocab {cfg['vocab_size']}")


def register(app: typer.Typer) -> None:
    model_app = typer.Typer(help="Model directories for --load-format dummy.", no_args_is_help=True)
    model_app.command("make")(make)
    model_app.command("list")(list_presets)
    app.add_typer(model_app, name="model")


def check_model_dir(out_dir: Path, force: bool) -> None:
    """A model directory is written new or empty: the files of one already there (perhaps a real
    model's) are replaced only with --force."""
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        held = sorted(p.name for p in out_dir.iterdir())
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        raise ServetuneError(f"{out_dir}: not empty (holds {shown}); pass --force to write the model into it, "
                             "or name a new directory")
    writable_dir(out_dir, "DIR")
