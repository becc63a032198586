"""ToolScale: tools derived from each domain's db.json, and seeded, verified tasks over them.

See docs/toolscale.md. `data` loads a domain and infers its shape, `tools` derives the typed tools,
`tasks` generates and verifies tasks, `environment` ties them into the `toolscale:<domain>` envs.
"""
