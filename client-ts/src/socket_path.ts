/**
 * Where the daemon's socket is when the caller does not say: `$RECALLD_SOCKET` (a path or a
 * `unix://` URL), else `$XDG_RUNTIME_DIR/recalld/recalld.sock`, else `/tmp/recalld-<uid>/recalld.sock`.
 */

import { join } from "node:path";

/** Turns `unix:///run/x.sock`, `unix:/run/x.sock` or a plain path into a filesystem path. */
export function socketPathFromSpec(spec: string): string {
  let path = spec;
  if (spec.startsWith("unix://")) path = spec.slice("unix://".length);
  else if (spec.startsWith("unix:")) path = spec.slice("unix:".length);
  if (path.includes("%")) {
    try {
      path = decodeURIComponent(path);
    } catch {
      // Not percent-encoded after all: take it as written.
    }
  }
  return path;
}

export function defaultSocketPath(
  env: NodeJS.ProcessEnv = process.env,
  uid: number | undefined = process.getuid?.(),
): string {
  const explicit = env["RECALLD_SOCKET"];
  if (explicit) return socketPathFromSpec(explicit);
  const runtime = env["XDG_RUNTIME_DIR"];
  if (runtime) return join(runtime, "recalld", "recalld.sock");
  return join("/tmp", `recalld-${uid ?? 0}`, "recalld.sock");
}
