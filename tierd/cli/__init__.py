"""The ``tierd`` command line (the ``tierd`` script and ``python -m tierd`` run :func:`tierd.cli.main.main`).

Modules:

- ``main``: the parser of every command, and errors as exit codes.
- ``daemon``: the daemon's own commands, run on its node: ``run``, ``db``, ``config``.
- ``systemd``: ``systemd drop-in``, the hardened unit's paths for this config.
- ``remote``: what every command that talks to a running daemon shares (``--url``, ``--token``,
  ``--token-file``, ``--ca-file``, ``--json``, a checkpoint named by id or ``RUN:STEP``).
- ``connection``: the daemon's URL and the bearer token, from the flags, the environment
  (``$TIERD_URL``, ``$TIERD_TOKEN``) or the config.
- ``tls``: how the CLI checks an https daemon's certificate (its CAs, or the config's own).
- ``checkpoints``: ``ls``, ``show``, ``verify``, ``audit``, ``runs``, ``latest``.
- ``protection``: ``pin``, ``unpin``, ``hold``, ``release``, ``delete``, ``undelete``.
- ``tiers``: ``tiers``, ``reserve``, ``retention plan``.
- ``restores``: ``restore`` and ``jobs``.
- ``fleet``: ``status`` and ``fleet``.
- ``usage``: ``usage``, what each tier holds and costs, and in 30 days.
- ``http``: :class:`~tierd.cli.http.DaemonApi`, the commands' HTTP client for the daemon's API.
- ``display``: text for people from the API's JSON (sizes, times, tables), escaped.
- ``terminal``: colour only where wanted (``--no-color``, ``$NO_COLOR``, ``TERM=dumb``, not a terminal).
- ``completion``: ``completion bash|zsh``, the shell's completion script (shtab).
"""
