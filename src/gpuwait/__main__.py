"""``python -m gpuwait`` runs the CLI."""

from gpuwait.cli.main import main

raise SystemExit(main())
