from cnnvideo.tools.cli import main  # the CLI is a tool; this shim keeps `python -m cnnvideo` working

raise SystemExit(main())
