"""Tenant policy: YAML files in `policy_dir` → frozen, validated `TenantPolicy` models.

Public names: `TenantPolicy` (policies.model), `PolicyStore` / `PolicySnapshot` (policies.store),
`load_policy_file` / `check_paths` (policies.loader), `PolicyIssue` / `PolicyFileError`
(policies.errors). Import them from their modules.
"""
