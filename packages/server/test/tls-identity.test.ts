/** Issue 17: a handler reads who a verified client certificate names (tls-identity.ts). */
import type { PeerCertificate } from 'node:tls';
import { describe, expect, it } from 'vitest';

import { certificateNames, clientCertificateIdentity, dnsNames } from '../src/tls-identity.js';

const call = (cert: Partial<PeerCertificate> | undefined) => ({
  getAuthContext: () => (cert === undefined ? {} : { transportSecurityType: 'ssl', sslPeerCertificate: cert as PeerCertificate }),
});
const RAW = Buffer.from('der');

describe('clientCertificateIdentity', () => {
  it('is the CN of the verified certificate', () => {
    expect(clientCertificateIdentity(call({ raw: RAW, subject: { CN: 'alice' } as PeerCertificate['subject'], subjectaltname: 'DNS:alice.example' }))).toBe('alice');
  });

  it('is the first DNS name without a CN', () => {
    expect(clientCertificateIdentity(call({ raw: RAW, subject: { O: 'example' } as unknown as PeerCertificate['subject'], subjectaltname: 'IP Address:10.0.0.1, DNS:svc.example, DNS:other' }))).toBe('svc.example');
  });

  it('is null without a verified certificate (plaintext, none presented, or not verified), or with neither name', () => {
    expect(clientCertificateIdentity(call(undefined))).toBeNull();
    // grpc-js hands over an empty object when the peer sent no certificate.
    expect(clientCertificateIdentity(call({} as PeerCertificate))).toBeNull();
    expect(clientCertificateIdentity(call({ raw: RAW, subject: {} as PeerCertificate['subject'], subjectaltname: 'IP Address:10.0.0.1' }))).toBeNull();
  });

  it('takes the first of several CNs', () => {
    expect(clientCertificateIdentity(call({ raw: RAW, subject: { CN: ['first', 'second'] } as unknown as PeerCertificate['subject'] }))).toBe('first');
  });
});

describe('certificate names', () => {
  it('are the CN then every DNS name', () => {
    expect(certificateNames({ raw: RAW, subject: { CN: 'n1' }, subjectaltname: 'DNS:n1, DNS:localhost, IP Address:127.0.0.1' } as unknown as PeerCertificate)).toEqual(['n1', 'n1', 'localhost']);
    expect(dnsNames(undefined)).toEqual([]);
    expect(dnsNames('email:a@b, URI:spiffe://x, DNS:a')).toEqual(['a']);
  });
});
