// SPDX-License-Identifier: MIT
// Types of @runwarden/ai-sandbox (hand-written; the package ships plain ESM).
import type {
  SandboxCapabilities,
  SandboxHandle,
  SandboxProvider,
} from '@tanstack/ai-sandbox'

export interface RunwardenSandboxOptions {
  /** The routerd base URL, e.g. `http://127.0.0.1:8787`. */
  url: string
  /** A bearer token of `[routerd] tokens_file` (none when the server has no tokens file). */
  token?: string
  /**
   * A fetch implementation (default: `globalThis.fetch`; under Node without
   * this option, `process.exec`'s request goes through `node:http(s)` with a
   * keep-alive agent instead, which is faster).
   */
  fetch?: typeof globalThis.fetch
  /**
   * Put before every sandbox id on the wire. Default: the prefix of the first
   * `PREFIX*` item of the token's thread scope (`GET /capabilities` →
   * `scope.threads`), '' for an unscoped token. `handle.id` stays the
   * caller's id.
   */
  idPrefix?: string
  /**
   * A WebSocket constructor for spawn with a writable stdin (default:
   * `globalThis.WebSocket`; Node 20 has none without
   * `--experimental-websocket`, so pass `WebSocket` from the `ws` package).
   * Without one, `writableStdin` is false and spawn streams over NDJSON.
   */
  WebSocket?: new (url: string, protocols?: string | string[]) => unknown
  /**
   * Host names (`host[:port]`) the sandbox may reach through its egress
   * proxy, set at create and restore (`PUT /sandboxes/{id}/egress`); each
   * must be within the operator's `[coordinatord] sandbox_egress_allow`, else
   * create fails 403 `egress_forbidden`. Default: no egress.
   */
  egress?: string[]
  /** `destroy` keeps the workspace (`DELETE …?keep=workspace`). Default false. */
  keepWorkspaceOnDestroy?: boolean
}

/** `SandboxCapabilities` plus upstream's `killableProcesses`. */
export type RunwardenCapabilities = SandboxCapabilities & { killableProcesses: boolean }

/** The server's `GET /capabilities` answer. */
export interface RunwardenServerCapabilities {
  version: number
  sandbox: Record<string, boolean>
  limits: Record<string, number>
  scope: { threads: string[] | null }
  shell: string
}

export interface RunwardenSandboxProvider extends SandboxProvider {
  readonly name: 'runwarden'
  /**
   * Conservative values until the first `create`/`resume`/`ready()` fetched
   * `GET /capabilities`, the server's after. `defineSandbox().ensure()` reads
   * them before it creates: `await provider.ready()` first.
   */
  capabilities: () => RunwardenCapabilities
  /** Fetches (once) and returns the capabilities. */
  ready: () => Promise<RunwardenCapabilities>
  /** The raw `GET /capabilities` answer, null before it was fetched. */
  readonly serverCapabilities: RunwardenServerCapabilities | null
  /** The id prefix in use (known after `ready()`). */
  readonly idPrefix: string | undefined
  restoreSnapshot: NonNullable<SandboxProvider['restoreSnapshot']>
}

export interface RunwardenFs {
  lstat: (path: string) => Promise<{ type: 'file' | 'dir' | 'symlink' | 'other'; mode: number; size?: number } | undefined>
}

export type RunwardenSandboxHandle = SandboxHandle & { fs: SandboxHandle['fs'] & RunwardenFs }

export declare function runwardenSandbox(options: RunwardenSandboxOptions): RunwardenSandboxProvider

/** An HTTP error of the runwarden API. */
export declare class RunwardenError extends Error {
  readonly name: 'RunwardenError'
  /** The HTTP status (undefined for an error inside a stream). */
  readonly status?: number
  /** The `code` of the JSON error body (`thread_forbidden`, `too_many_execs`, …). */
  readonly code?: string
  readonly method?: string
  readonly path?: string
}

export declare function mapCapabilities(raw: unknown, haveWebSocket: boolean): RunwardenCapabilities
export declare function scopePrefix(raw: unknown): string
export declare function parseSnapshotRef(ref: string): { sandboxId: string; snapshotId: string }
