//! One live connection per server address, made on first use (authenticated as the process's
//! user, where it has one) and remade once it has died.

use crate::client::{RpcClient, RpcClientConfig};
use crate::error::RpcError;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug)]
pub struct RpcPool {
    config: RpcClientConfig,
    clients: Mutex<HashMap<String, RpcClient>>,
}

impl RpcPool {
    pub fn new(config: RpcClientConfig) -> Self {
        Self {
            config,
            clients: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> RpcClientConfig {
        self.config
    }

    fn cached(&self, addr: &str) -> Option<RpcClient> {
        let clients = self.clients.lock().ok()?;
        clients.get(addr).filter(|c| !c.is_closed()).cloned()
    }

    /// The live connection to `addr`, connecting if there is none.
    pub async fn get(&self, addr: &str) -> Result<RpcClient, RpcError> {
        if let Some(client) = self.cached(addr) {
            return Ok(client);
        }
        let fresh = RpcClient::connect(addr, self.config).await?;
        // Where the process has a user (the CLI's --user), every pooled connection proves it
        // before its first call.
        if let Some(login) = crate::login::outgoing() {
            crate::login::log_in(&fresh, &login).await?;
        }
        let Ok(mut clients) = self.clients.lock() else {
            return Ok(fresh);
        };
        // Another task may have connected meanwhile: keep one connection per address.
        match clients.get(addr) {
            Some(existing) if !existing.is_closed() => Ok(existing.clone()),
            _ => {
                clients.insert(addr.to_string(), fresh.clone());
                Ok(fresh)
            }
        }
    }

    /// Drops the connection to `addr` (after an error that makes it suspect).
    pub fn forget(&self, addr: &str) {
        if let Ok(mut clients) = self.clients.lock()
            && let Some(client) = clients.remove(addr)
        {
            client.close("forgotten by pool");
        }
    }
}
