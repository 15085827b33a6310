// node-opcua as an independent OPC UA client (test/test_opcua_node_peer.py): connect to a
// server with Basic256Sha256 SignAndEncrypt and a user name, resolve a namespace by its URI,
// read each node's DataType and Value, write them as JSON to spec.out. Only loopback is used.
//   node read_nodes.js <spec.json>
// spec: {url, pki, cert, key, serverCert, applicationUri, user, password, namespaceUri,
//        ids: ["\"DB\".\"field\"", ...], out: "result.json"}
"use strict";
const fs = require("fs");
const path = require("path");
const {
    OPCUAClient, MessageSecurityMode, SecurityPolicy, AttributeIds, OPCUACertificateManager,
    UserTokenType,
} = require("node-opcua");

async function main() {
    const spec = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
    const manager = new OPCUACertificateManager({
        rootFolder: spec.pki, automaticallyAcceptUnknownCertificate: false,
    });
    await manager.initialize();
    // the server's certificate is trusted explicitly, as the bridge's trust list does
    await manager.trustCertificate(fs.readFileSync(spec.serverCert));
    const client = OPCUAClient.create({
        applicationName: "excavator_hil node-opcua peer",
        applicationUri: spec.applicationUri,
        securityMode: MessageSecurityMode.SignAndEncrypt,
        securityPolicy: SecurityPolicy.Basic256Sha256,
        certificateFile: spec.cert,
        privateKeyFile: spec.key,
        clientCertificateManager: manager,
        endpointMustExist: false,
        connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    });
    await client.connect(spec.url);
    const session = await client.createSession({
        type: UserTokenType.UserName, userName: spec.user, password: spec.password,
    });
    const namespaces = await session.readNamespaceArray();
    const ns = namespaces.indexOf(spec.namespaceUri);
    const nodes = [];
    for (const id of spec.ids) {
        const nodeId = `ns=${ns};s=${id}`;
        const [dt, value] = await session.read([
            { nodeId, attributeId: AttributeIds.DataType },
            { nodeId, attributeId: AttributeIds.Value },
        ]);
        nodes.push({
            id, nodeId, status: value.statusCode.name,
            dataType: dt.value.value ? dt.value.value.value : null,
            variantType: value.value.dataType,
            value: value.value.value,
        });
    }
    await session.close();
    await client.disconnect();
    fs.writeFileSync(spec.out, JSON.stringify({ namespaceIndex: ns, nodes }));
}

main().catch((err) => {
    process.stderr.write(`node-opcua peer: ${err && err.stack ? err.stack : err}\n`);
    process.exit(1);
});
