const fs=require('fs');const dir=process.argv[2];
const f=fs.readdirSync(dir).filter(x=>x.endsWith('.cpuprofile'))[0];
const p=JSON.parse(fs.readFileSync(dir+'/'+f));
const self=new Map();const byId=new Map(p.nodes.map(n=>[n.id,n]));
const dt=p.timeDeltas;let total=0;
p.samples.forEach((id,i)=>{const n=byId.get(id);const c=n.callFrame;const key=c.functionName+' '+c.url.split('/').slice(-2).join('/')+':'+c.lineNumber;self.set(key,(self.get(key)||0)+dt[i]);total+=dt[i];});
[...self.entries()].sort((a,b)=>b[1]-a[1]).slice(0,40).forEach(([k,v])=>console.log((v/total*100).toFixed(1)+'%',k));
