package zktest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/tlsconfig/tlstest"
)

// TLSServer is a dedicated standalone server with a TLS client port beside its plaintext one.
type TLSServer struct {
	*Server
	// Secure is the address of the secureClientPort (127.0.0.1:port).
	Secure string
	// CA vouches for the server's certificate (CA.File for --zk-tls-ca).
	CA *tlstest.CA
}

// StartTLS starts a dedicated server with a secureClientPort, as ZooKeeper 3.5+ serves TLS:
// the Netty connection factory with PEM key and trust stores, clients not asked for a
// certificate (ssl.clientAuth=none). Debian's zookeeper.jar names netty's transport and handler
// in its manifest but not netty-codec, which the Netty factory needs: it is put on the class
// path, and the test skipped without it. Stopped at cleanup.
func StartTLS(t testing.TB) *TLSServer {
	t.Helper()
	Addr(t) // skips (or fails under ZKBRIDGE_REQUIRE_ZK) without a ZooKeeper installation
	codec := "/usr/share/java/netty-codec.jar"
	if _, err := os.Stat(codec); err != nil {
		t.Skipf("no %s for ZooKeeper's Netty connection factory (apt-get install libnetty-java)", codec)
	}
	ca := tlstest.NewCA(t, "ca")
	pair := ca.Server(t, "zookeeper")
	keyStore := filepath.Join(t.TempDir(), "zookeeper.pem")
	if err := os.WriteFile(keyStore, append(append([]byte{}, pair.CertPEM...), pair.KeyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	t.Setenv("ZK_EXTRA_CFG", strings.Join([]string{
		"secureClientPort=" + strconv.Itoa(port),
		"secureClientPortAddress=127.0.0.1",
		"serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
		"ssl.keyStore.location=" + keyStore,
		"ssl.keyStore.type=PEM",
		"ssl.trustStore.location=" + ca.File,
		"ssl.trustStore.type=PEM",
		"ssl.clientAuth=none",
	}, "\n"))
	t.Setenv("ZK_CLASSPATH", jarPath()+":"+codec)
	t.Setenv("ZK_START_TIMEOUT", "20")
	s := StartServer(t)
	secure := "127.0.0.1:" + strconv.Itoa(port)
	// The script waits for the plaintext port; the secure one may open a little later.
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", secure, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ZooKeeper's secure client port %s: %v", secure, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &TLSServer{Server: s, Secure: secure, CA: ca}
}
