// SPDX-License-Identifier: MIT
import type {
  FetchConnectionOptions,
  ResumableConnectConnectionAdapter,
  SubscribeConnectionAdapter,
  WebSocketConnectionOptions,
} from '@tanstack/ai-client'

/** What every runwarden wrapper adds to the stock adapter's options. */
export interface RunwardenOptions {
  /** A runwarden token ([routerd] tokens_file): Authorization on HTTP, the bearer.<base64url> subprotocol on WebSocket. */
  token?: string
  /** Turn CUSTOM process.stdout/stderr into interim tool results (default true). */
  liveOutput?: boolean
  /** On an abort (Stop, or the chat unmounting) before the run ended, POST /runs/{id}/cancel (default true). */
  cancelOnStop?: boolean
}

export type RunwardenFetchOptions = Omit<FetchConnectionOptions, 'headers'> &
  RunwardenOptions & { headers?: Record<string, string> }

export type RunwardenWebSocketOptions = WebSocketConnectionOptions &
  RunwardenOptions & { headers?: Record<string, string>; credentials?: RequestCredentials }

export declare function runwardenSSE(
  url: string | (() => string),
  options?: RunwardenFetchOptions,
): ResumableConnectConnectionAdapter

export declare function runwardenHttpStream(
  url: string | (() => string),
  options?: RunwardenFetchOptions,
): ResumableConnectConnectionAdapter

export declare function runwardenWebSocket(
  url: string | (() => string),
  options?: RunwardenWebSocketOptions,
): SubscribeConnectionAdapter & Required<Pick<ResumableConnectConnectionAdapter, 'joinRun' | 'hydrate'>>

/** POST /runs/{runId}/cancel?threadId= next to the /chat URL; resolves to the HTTP status (undefined on a network error). */
export declare function cancelRun(
  chatUrl: string,
  runId: string,
  threadId: string,
  options?: RunwardenOptions & { headers?: Record<string, string>; credentials?: RequestCredentials; fetchClient?: typeof fetch },
): Promise<number | undefined>
