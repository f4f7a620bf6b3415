"""The web planner (optional extra `web`): the CLI's commands behind an HTTP API (`app`), a job queue for
searches (`jobs`), the work of each endpoint (`tasks`), request bodies and their bounds (`inputs`,
`schema`), and the page in `static/`. Start it with `shardwise web`."""
