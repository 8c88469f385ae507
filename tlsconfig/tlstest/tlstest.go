// Package tlstest makes certificates for tests, in process (crypto/x509): a CA, server
// certificates for loopback, client certificates with a chosen subject, written as PEM files.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority that signs the test's certificates.
type CA struct {
	Cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	dir     string
	CertPEM []byte
	// File is the CA certificate as a PEM file.
	File string
}

var serial atomic.Int64

// NewCA makes a CA whose files live in the test's temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"zkbridge tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, dir: t.TempDir(), CertPEM: pemBlock("CERTIFICATE", der)}
	ca.File = filepath.Join(ca.dir, "ca.pem")
	writeFile(t, ca.File, ca.CertPEM)
	return ca
}

// Pool is a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Pair is a signed certificate and its key, as PEM and as files.
type Pair struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
	Serial            *big.Int
	TLS               tls.Certificate
}

// Server makes a certificate for 127.0.0.1, ::1 and localhost (and the extra DNS names).
func (ca *CA) Server(t testing.TB, name string, dns ...string) *Pair {
	t.Helper()
	return ca.sign(t, name, pkix.Name{CommonName: "localhost"}, append([]string{"localhost"}, dns...),
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, x509.ExtKeyUsageServerAuth)
}

// Client makes a client certificate with the given subject.
func (ca *CA) Client(t testing.TB, name string, subject pkix.Name) *Pair {
	t.Helper()
	return ca.sign(t, name, subject, nil, nil, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) sign(t testing.TB, name string, subject pkix.Name, dns []string, ips []net.IP, usage x509.ExtKeyUsage) *Pair {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := &Pair{
		CertPEM:  pemBlock("CERTIFICATE", der),
		KeyPEM:   pemBlock("PRIVATE KEY", kder),
		CertFile: filepath.Join(ca.dir, name+".pem"),
		KeyFile:  filepath.Join(ca.dir, name+"-key.pem"),
		Serial:   tmpl.SerialNumber,
	}
	writeFile(t, p.CertFile, p.CertPEM)
	writeFile(t, p.KeyFile, p.KeyPEM)
	if p.TLS, err = tls.X509KeyPair(p.CertPEM, p.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return p
}

// ClientConfig is a client configuration that trusts the CA and, with a pair, presents it.
func (ca *CA) ClientConfig(p *Pair) *tls.Config {
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if p != nil {
		cfg.Certificates = []tls.Certificate{p.TLS}
	}
	return cfg
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
