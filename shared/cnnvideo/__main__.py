from cnnvideo.cli import main

raise SystemExit(main())
