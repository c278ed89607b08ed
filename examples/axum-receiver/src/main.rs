//! `axum-receiver`: listens on `RECEIVER_LISTEN` (default `127.0.0.1:3000`) with its table in
//! `RECEIVER_DATABASE` (default `receiver.db`), verifying Stripe deliveries with `STRIPE_WEBHOOK_SECRET` and
//! Standard Webhooks deliveries with `STANDARD_WEBHOOKS_SECRET` (each a comma-separated list while a secret is
//! rotated).

use axum_receiver::{Db, app};
use payhook_verify::Webhook;

fn secrets(var: &str) -> Result<Vec<String>, String> {
    let value = std::env::var(var).map_err(|_| format!("{var} is not set"))?;
    Ok(value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stripe = Webhook::preset("stripe", secrets("STRIPE_WEBHOOK_SECRET")?)?;
    let standard = Webhook::preset("standard-webhooks", secrets("STANDARD_WEBHOOKS_SECRET")?)?;
    let db = Db::open(&std::env::var("RECEIVER_DATABASE").unwrap_or_else(|_| "receiver.db".to_owned()))?;
    let listen = std::env::var("RECEIVER_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("axum-receiver listening on {listen}");
    axum::serve(listener, app(stripe, standard, db)).await?;
    Ok(())
}
