// SPDX-License-Identifier: MIT
// @runwarden/ai-sandbox — runwarden as a TanStack AI sandbox provider.
export { runwardenSandbox, mapCapabilities, scopePrefix, parseSnapshotRef } from './src/provider.js'
export { RunwardenError } from './src/http.js'
