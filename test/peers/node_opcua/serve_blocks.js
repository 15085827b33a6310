// node-opcua as an independent OPC UA server (test/test_opcua_node_peer.py): the bridge's data
// blocks as an S7-1500 names them, Basic256Sha256 SignAndEncrypt only, a user login, the
// bridge's certificate trusted explicitly. Every variable written is appended to spec.log as a
// JSON line {field, value}, in the order the server applied them. Loopback only.
//   node serve_blocks.js <spec.json>
// spec: {port, pki, cert, key, applicationUri, trust: [der paths], user, password,
//        namespaceUri, blocks: [{name, writable, fields: [{name, type, value}]}], log}
"use strict";
const fs = require("fs");
const {
    OPCUAServer, OPCUACertificateManager, SecurityPolicy, MessageSecurityMode, DataType,
    Variant, StatusCodes,
} = require("node-opcua");

async function main() {
    const spec = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
    const manager = new OPCUACertificateManager({
        rootFolder: spec.pki, automaticallyAcceptUnknownCertificate: false,
    });
    await manager.initialize();
    for (const der of spec.trust) {
        await manager.trustCertificate(fs.readFileSync(der));
    }
    const server = new OPCUAServer({
        port: spec.port, hostname: "127.0.0.1",
        serverCertificateManager: manager,
        certificateFile: spec.cert, privateKeyFile: spec.key,
        serverInfo: { applicationUri: spec.applicationUri, productUri: "node-opcua peer" },
        securityPolicies: [SecurityPolicy.Basic256Sha256],
        securityModes: [MessageSecurityMode.SignAndEncrypt],
        allowAnonymous: false,
        userManager: { isValidUser: (u, p) => u === spec.user && p === spec.password },
    });
    await server.initialize();
    const ns = server.engine.addressSpace.registerNamespace(spec.namespaceUri);
    const log = fs.openSync(spec.log, "a");
    for (const block of spec.blocks) {
        const folder = ns.addObject({
            organizedBy: server.engine.addressSpace.rootFolder.objects,
            browseName: block.name, nodeId: `s="${block.name}"`,
        });
        for (const f of block.fields) {
            let current = new Variant({ dataType: DataType[f.type], value: f.value });
            ns.addVariable({
                componentOf: folder, browseName: f.name, dataType: f.type,
                nodeId: `s="${block.name}"."${f.name}"`,
                accessLevel: block.writable ? "CurrentRead | CurrentWrite" : "CurrentRead",
                userAccessLevel: block.writable ? "CurrentRead | CurrentWrite" : "CurrentRead",
                value: {
                    get: () => current,
                    set: (variant) => {
                        if (variant.dataType !== DataType[f.type]) {
                            return StatusCodes.BadTypeMismatch;
                        }
                        current = variant;
                        fs.writeSync(log, JSON.stringify({
                            block: block.name, field: f.name, value: variant.value,
                        }) + "\n");
                        return StatusCodes.Good;
                    },
                },
            });
        }
    }
    await server.start();
    fs.writeFileSync(spec.ready, String(server.endpoints[0].port));
    const stop = async () => { await server.shutdown(100); process.exit(0); };
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
}

main().catch((err) => {
    process.stderr.write(`node-opcua peer: ${err && err.stack ? err.stack : err}\n`);
    process.exit(1);
});
