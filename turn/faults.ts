// Why a connection failed, in a person's words: for a model that can't be reached, or a runtime.

/** Why a connection failed, in a person's words, from the error's code (its cause's, or theirs). */
const CONNECTION_FAULTS: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset",
  ENOTFOUND: "no such host",
  EAI_AGAIN: "the host's name could not be looked up",
  ETIMEDOUT: "timed out",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  UND_ERR_CONNECT_TIMEOUT: "timed out connecting",
  UND_ERR_SOCKET: "the connection closed",
  CERT_HAS_EXPIRED: "its certificate has expired",
  DEPTH_ZERO_SELF_SIGNED_CERT: "its certificate is self-signed",
  SELF_SIGNED_CERT_IN_CHAIN: "a certificate in its chain is self-signed",
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: "its certificate could not be verified",
  ERR_TLS_CERT_ALTNAME_INVALID: "its certificate is for another host",
};

/** The reason a connection failed: the first code found down the chain of causes. */
export function connectionFault(e: unknown): string | undefined {
  let at: unknown = e;
  for (let depth = 0; depth < 6 && at !== null && typeof at === "object"; depth++) {
    const code = (at as { code?: unknown }).code;
    if (typeof code === "string") return CONNECTION_FAULTS[code] ?? code;
    const nested = (at as { errors?: unknown }).errors;
    if (Array.isArray(nested) && nested.length > 0) at = nested[0];
    else at = (at as { cause?: unknown }).cause;
  }
  return undefined;
}
