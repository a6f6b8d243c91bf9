"""`servetune model make PRESET DIR`."""

from __future__ import annotations

from pathlib import Path

import typer

from ..models.presets import PRESETS, make_model


def register(app: typer.Typer) -> None:
    model_app = typer.Typer(help="Model directories for --load-format dummy.", no_args_is_help=True)

    @model_app.command("make")
    def make(
        preset: str = typer.Argument(..., help=f"one of: {', '.join(PRESETS)}"),
        out_dir: Path = typer.Argument(..., help="directory to write"),
    ) -> None:
        """Write config.json, generation_config.json and a synthetic tokenizer."""
        path = make_model(preset, out_dir)
        typer.echo(str(path))

    @model_app.command("list")
    def list_presets() -> None:
        """List the model presets."""
        for name, cfg in PRESETS.items():
            typer.echo(f"{name}: {cfg['architectures'][0]}, {cfg['num_hidden_layers']} layers, "
                       f"hidden {cfg['hidden_size']}, vocab {cfg['vocab_size']}")

    app.add_typer(model_app, name="model")
