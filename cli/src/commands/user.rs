//! `tailstream user create|delete|list`: the users Kafka clients authenticate as (SCRAM-SHA-256
//! and -512, and PLAIN against the same credential). The password is read here and salted
//! here: the coordinator is sent the derived keys, never the password.

use clap::Subcommand;
use std::io::BufRead;
use tailstream_auth::scram::{ITERATIONS_DEFAULT, new_credential};
use tailstream_config::Config;
use tailstream_wire::messages::ScramMechanism;

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Add a user, with a credential for SCRAM-SHA-256 and one for SCRAM-SHA-512.
    Create {
        name: String,
        /// The password; without it, the first line of stdin is.
        #[arg(long)]
        password: Option<String>,
        /// PBKDF2 iterations of the salted password (4096 to 16384, Kafka's bounds).
        #[arg(long, default_value_t = ITERATIONS_DEFAULT)]
        iterations: u32,
    },
    /// Remove a user (brokers stop accepting it within 10 s).
    Delete { name: String },
    /// Every user and the mechanisms it has credentials for.
    List,
}

pub async fn run(config: Config, coordinator: &str, command: UserCommand) -> Result<(), String> {
    let client = super::client(&config, coordinator);
    let coordinator = client.coordinator();
    let token = super::admin_token(&config);
    match command {
        UserCommand::Create {
            name,
            password,
            iterations,
        } => {
            tailstream_auth::check_user_name(&name)?;
            let password = match password {
                Some(password) => password,
                None => {
                    let mut line = String::new();
                    std::io::stdin()
                        .lock()
                        .read_line(&mut line)
                        .map_err(|e| format!("reading the password from stdin: {e}"))?;
                    line.trim_end_matches(['\r', '\n']).to_owned()
                }
            };
            if password.is_empty() {
                return Err("an empty password".into());
            }
            let credentials = ScramMechanism::ALL
                .iter()
                .copied()
                .map(|mechanism| new_credential(mechanism, &password, iterations))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            coordinator
                .create_user(&token, &name, credentials)
                .await
                .map_err(|e| e.to_string())?;
            println!("user {name} created (SCRAM-SHA-256, SCRAM-SHA-512; PLAIN where enabled)");
        }
        UserCommand::Delete { name } => {
            coordinator
                .delete_user(&token, &name)
                .await
                .map_err(|e| e.to_string())?;
            println!("user {name} deleted");
        }
        UserCommand::List => {
            for user in coordinator
                .list_users(&token)
                .await
                .map_err(|e| e.to_string())?
            {
                let mechanisms: Vec<&str> = user.mechanisms.iter().map(|m| m.sasl_name()).collect();
                println!("{}\t{}", user.name, mechanisms.join(","));
            }
        }
    }
    Ok(())
}
