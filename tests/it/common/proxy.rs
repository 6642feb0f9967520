//! A TCP proxy in front of PostgreSQL that a test can cut and restore: the store becomes
//! unreachable (connections reset, new ones refused) exactly as when its host goes away.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::{wait_until, DEADLINE};

/// A proxy listening on an ephemeral loopback port and forwarding to `upstream`.
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    upstream: SocketAddr,
    running: Arc<Mutex<Option<JoinSet<()>>>>,
}

impl Proxy {
    /// Starts forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Proxy {
            addr: listener.local_addr().unwrap(),
            upstream,
            running: Arc::default(),
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: TcpListener) {
        let upstream = self.upstream;
        let mut tasks = JoinSet::new();
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let owned = Arc::clone(&connections);
        tasks.spawn(async move {
            // Dropping this task's JoinSet aborts every forwarded connection with it.
            let _connections = owned;
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                _connections.lock().unwrap().spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        drop(connections);
        *self.running.lock().unwrap() = Some(tasks);
    }

    /// Resets every open connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        // Aborting the accept task drops the listener (new connections are refused) and the
        // connection set (open ones are closed).
        self.running.lock().unwrap().take();
    }

    /// Listens again on the same address.
    pub async fn restore(&self) {
        let mut listener = None;
        // The old socket may take a moment to release the port.
        wait_until("the proxy's port to be free again", DEADLINE, async || {
            listener = TcpListener::bind(self.addr).await.ok();
            listener.is_some()
        })
        .await;
        self.serve(listener.unwrap());
    }
}
