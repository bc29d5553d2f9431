"""``autotune profile``: derive a layer profile (analytic from the config's model dims)."""

from __future__ import annotations

import click

from autotune.commands.tune import _config_arg, _device_opt, _overrides, _set_opt, _write


@click.command("profile")
@_config_arg
@_device_opt
@_set_opt
@click.option("--out", "out", default=None, help="Write the profile YAML here (default: stdout).")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
def profile_cmd(config: str, device: str, sets: tuple[str, ...], out: str | None, force: bool) -> None:
    """Derive an analytic layer profile from CONFIG's model dims and parallel sizes."""
    from autotune.api import load_config
    from autotune.profile.analytic import analytic_profile

    prof = analytic_profile(load_config(config), device, overrides=_overrides(sets))
    text = prof.to_yaml()
    click.echo("assumptions (override with --set KEY=VALUE):", err=True)
    for k, v in prof.assumptions.items():
        click.echo(f"  {k} = {v}", err=True)
    if out:
        _write(out, text, force)
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(text)


COMMANDS = [profile_cmd]
