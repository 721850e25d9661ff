//! `prova certs init | issue`: the cluster CA and per-peer bundles.

use prova_protocol::transport::{Role, certs};

use super::common;
use crate::args::CertsCommand;
use crate::exit::Code;

/// Runs a certs subcommand.
pub fn certs(cmd: CertsCommand) -> anyhow::Result<Code> {
    match cmd {
        CertsCommand::Init { dir, sans } => {
            certs::init(&dir, &sans)?;
            let shown = if sans.is_empty() { certs::default_sans() } else { sans };
            common::print(&format!(
                "created the cluster CA in {}\ncreated the coordinator bundle in {} (names: {})\n",
                dir.join(certs::CA_DIR).display(),
                dir.join(certs::COORDINATOR_NAME).display(),
                shown.join(", ")
            ))?;
        }
        CertsCommand::Issue { dir, role, name } => {
            let role: Role = role.parse().map_err(|_| {
                anyhow::anyhow!("unknown role `{role}`: use worker, ci, client or admin")
            })?;
            if role == Role::Coordinator {
                anyhow::bail!("the coordinator's bundle comes from `prova certs init`");
            }
            let path = certs::issue(&dir, role, &name)?;
            let article = if role == Role::Admin { "an" } else { "a" };
            common::print(&format!(
                "issued {article} {role} bundle for {name:?} in {}\n",
                path.display()
            ))?;
        }
    }
    Ok(Code::Ok)
}
