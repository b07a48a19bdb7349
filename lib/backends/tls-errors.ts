/**
 * What the user set to configure TLS, named in the explanations: e.g. for Redis
 * `{ trust: 'backend.options.tls.ca', clientCertificate: 'backend.options.tls.cert and backend.options.tls.key' }`.
 */
export interface TlsOptionNames {
  readonly trust: string;
  readonly clientCertificate: string;
}

/** A TLS failure restated by explainTlsError; `cause` is the client's error. */
export class TlsFailure extends Error {
  constructor(
    message: string,
    /** A reset before any answer is a guess at the reason; the others are the handshake's own word. */
    readonly guessed: boolean,
    cause: Error,
  ) {
    super(message, { cause });
    this.name = 'TlsFailure';
  }
}

/**
 * The error to keep of `kept` (kept earlier, since the server last answered) and `latest`: a reset
 * guessed at does not replace the handshake's own word, which often comes just before it; with
 * `overAnyError`, no unexplained error replaces a TLS failure either (a client that retells its
 * last error may have lost it).
 */
export function moreTellingTlsError(kept: Error | undefined, latest: Error, overAnyError = false): Error {
  if (!(kept instanceof TlsFailure) || kept.guessed) return latest;
  return latest instanceof TlsFailure ? (latest.guessed ? kept : latest) : overAnyError ? kept : latest;
}

/** Node's codes for a server certificate that this process does not trust. */
const UNTRUSTED_SERVER = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/**
 * The same, as Node words them: what a client that wraps the TLS error in its own (gRPC's
 * "No connection established. Last error: ...") still shows.
 */
const UNTRUSTED_SERVER_WORDS =
  /self[- ]signed certificate|unable to verify the first certificate|unable to get (?:local )?issuer certificate|certificate has expired|certificate is not yet valid|does not match certificate's altnames/i;

/** An OpenSSL alert the server sent about our certificate (or the lack of one). */
const CLIENT_REFUSED = /(?:tlsv1|tlsv13|sslv3) alert (?:unknown ca|bad certificate|certificate required|certificate unknown|unsupported certificate|access denied|handshake failure)/i;

/**
 * The client's error for a TLS failure, restated so that it says what failed and which option to
 * change (the original stays as `cause`); any other error as it is. Client libraries report a
 * refused handshake in OpenSSL's wording, inside their own, or as a bare connection reset, none
 * of which names the option. Each backend calls this where it keeps a connection's error, so
 * unreachable() and the errors built from it carry the explanation.
 * `beforeFirstAnswer`: the connection never got an answer from the server. A reset then is
 * explained too: with TLS 1.3 a server refuses a missing or unknown client certificate after the
 * handshake, and the client may see only a reset on its first write; a plain port resets a
 * handshake too.
 */
export function explainTlsError(error: Error, options: TlsOptionNames, beforeFirstAnswer: boolean): Error {
  const code = (error as { code?: unknown }).code;
  const text = `${String(code ?? '')} ${error.message} ${(error as { reason?: unknown }).reason ?? ''}`;
  const untrusted = typeof code === 'string' && UNTRUSTED_SERVER.has(code) ? error.message : UNTRUSTED_SERVER_WORDS.exec(text)?.[0];
  const refused = CLIENT_REFUSED.exec(text)?.[0];
  let explanation: string | undefined;
  let guessed = false;
  if (untrusted !== undefined) {
    explanation = `TLS: the server's certificate is not trusted (${untrusted}); give the CA that signed it in ${options.trust}`;
  } else if (refused !== undefined) {
    explanation = `TLS: the server refused our client certificate (${refused}); give one signed by a CA the server trusts in ${options.clientCertificate}`;
  } else if (/wrong version number|packet length too long/i.test(text)) {
    explanation = `TLS: the server did not answer the TLS handshake (${error.message.trim()}); it may not have TLS on this port`;
  } else if (beforeFirstAnswer && (code === 'ECONNRESET' || code === 'EPIPE' || /\b(?:ECONNRESET|EPIPE)\b|socket disconnected before secure TLS connection/.test(text))) {
    guessed = true;
    explanation =
      `TLS: the server closed the connection during the handshake or before answering (${error.message.trim()}): the port may not serve TLS, ` +
      `or the server requires a client certificate and got none or one it does not trust; check ${options.clientCertificate}`;
  }
  return explanation === undefined ? error : Object.assign(new TlsFailure(explanation, guessed, error), { code });
}
