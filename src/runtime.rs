//! Everything built from one config: the upstreams, the natural-mode
//! engine, the tools, steps and store in use, and per-provider metrics.
//! A reload builds a new one and swaps it in whole; each request keeps the
//! one it started with until its response body ends. The doors and the
//! answer path take it; the gateway owns the swap.

use std::sync::Arc;

use crate::config::{Config, Provider};
use crate::metrics::request::ProviderMetrics;
use crate::natural;
use crate::store::Store;
use crate::tools::Tools;
use crate::tools::steps::StepStore;
use crate::upstream::catalog::Catalog;
use crate::upstream::{HealthBook, Upstreams};

/// Everything built from one config; replaced whole on reload.
pub struct Runtime {
    /// The config it was built from.
    pub config: Arc<Config>,
    pub(crate) upstreams: Upstreams,
    /// What each provider's upstream serves (`/v1/models`), as last asked.
    pub(crate) catalog: Catalog,
    pub(crate) natural: natural::Engine,
    pub(crate) tools: Arc<Tools>,
    pub(crate) steps: Arc<StepStore>,
    pub(crate) store: Option<Arc<Store>>,
    /// Per provider, in `config.providers` order.
    provider_metrics: Vec<Arc<ProviderMetrics>>,
    /// The handles of requests that reach no provider (`provider="none"`).
    pub(crate) unrouted: Arc<ProviderMetrics>,
}

impl Runtime {
    pub(crate) fn new(
        config: Arc<Config>,
        tools: Arc<Tools>,
        steps: Arc<StepStore>,
        store: Option<Arc<Store>>,
        health: &HealthBook,
    ) -> Self {
        crate::metrics::declare_tools(&config);
        let tenants = config.tenant_labels();
        Runtime {
            upstreams: Upstreams::new(&config, health),
            catalog: Catalog::default(),
            natural: natural::Engine::new(&config),
            tools,
            steps,
            store,
            provider_metrics: config
                .providers
                .iter()
                .map(|p| Arc::new(ProviderMetrics::new(&p.name, &tenants)))
                .collect(),
            unrouted: Arc::new(ProviderMetrics::new("none", &tenants)),
            config,
        }
    }

    pub(crate) fn metrics_of(&self, provider: &Arc<Provider>) -> Option<&Arc<ProviderMetrics>> {
        let i = self
            .config
            .providers
            .iter()
            .position(|p| Arc::ptr_eq(p, provider))?;
        self.provider_metrics.get(i)
    }
}
