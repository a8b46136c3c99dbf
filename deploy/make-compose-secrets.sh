#!/usr/bin/env sh
# Creates deploy/secrets/ for compose: one bearer token per role and the database password.
# Never commit the result (it is git-ignored). Re-running keeps existing secrets.
set -eu
dir="$(dirname "$0")/secrets"
mkdir -p "$dir"
chmod 700 "$dir"
random() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }

if [ ! -f "$dir/tokens.json" ]; then
  printf '{"world": "%s", "service": "%s", "operator": "%s"}\n' "$(random)" "$(random)" "$(random)" \
    > "$dir/tokens.json"
  # Bind-mounted into containers that run as uid 10001; the 0700 folder keeps other host users out.
  chmod 644 "$dir/tokens.json"
fi

if [ ! -f "$dir/egbe.env" ]; then
  password="$(random)"
  umask 077
  printf 'POSTGRES_PASSWORD=%s\nEGBE_DATABASE_URL=postgresql://egbe:%s@postgres:5432/egbe\n' \
    "$password" "$password" > "$dir/egbe.env"
fi
echo "secrets in $dir: tokens.json (world/service/operator bearer tokens), egbe.env (database)"
